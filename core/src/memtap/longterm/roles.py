"""Who a question is about: the user's own words, or what the assistant said.

Recall ranks assistant turns below the user's (:attr:`memtap.longterm.index.Fusion.assistant_factor`)
unless the question asks what the assistant said ("what did you recommend?", "the recipe
you gave me", "your suggestion"). A hand-written pattern, not a model: it runs on every
recall, and the phrasings are few. Asking for something new ("what should you suggest?",
"what do you recommend?") is about the user's preferences, not the assistant's past words.
"""

from __future__ import annotations

import re

#: Verbs of saying, suggesting and giving, as "did you ..." asks with them.
_BASE = (
    r"recommend|suggest|say|tell|give|mention|propose|advise|write|list|explain|describe|pick|"
    r"choose|come up with|share|show|send|offer|answer|reply|call|name|find|draft|plan|make"
)
#: The same verbs in the past, as "you ..." / "you'd ..." says them.
_PAST = (
    r"recommended|suggested|said|told|gave|given|mentioned|proposed|advised|wrote|written|"
    r"listed|explained|described|picked|chose|chosen|came up with|come up with|shared|showed|"
    r"shown|sent|offered|answered|replied|called|named|found|drafted|planned|made|put together"
)
_ASKS_ASSISTANT = re.compile(
    rf"\bdid\s+you\s+(?:\w+ly\s+)?(?:{_BASE})\b"
    rf"|\byou(?:'d|'ve|\s+had|\s+have|\s+just)?\s+(?:\w+ly\s+)?(?:{_PAST})\b"
    r"|\byour\s+(?:recommendation|suggestion|advice|answer|idea|list|recipe|plan|reply|"
    r"response|pick|tip|explanation|summary|draft|proposal|opinion)s?\b",
    re.IGNORECASE,
)


def asks_assistant(question: str) -> bool:
    """Whether ``question`` asks what the assistant said, suggested or gave ("what did you
    recommend?", "what was the recipe you gave me?", "your advice"), not what the user
    said ("do you remember my dog's name?") or wants now ("what should you suggest?")."""
    return _ASKS_ASSISTANT.search(question) is not None
