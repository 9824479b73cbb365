"""Whether a recalled fact can answer the question at all, by the kind of answer the
question asks for: a question asking for a name ("what's my dentist's name?", "what is my
cat called?") is not answered by a fact that names no one ("my husband is a dentist"),
however close in meaning. The recall injector leaves such facts out, so that a question
whose answer was never said injects nothing rather than an invitation to make one up.

Hand-written patterns, not a model: they run on every injection. A fact names something
when a word after its first is capitalised (not "I"), or a word follows "called",
"named" or "name is".
"""

from __future__ import annotations

import re

_ASKS_NAME = re.compile(
    r"\bname\b|\bnamed\b|\bcalled\b|\bwho\s+(?:is|was|are|were)\s+my\b",
    re.IGNORECASE,
)
#: A word after the first of a sentence piece that starts with a capital ("Dr Patel",
#: "Miso", "Leeds"), as names do in English; "I" and its contractions are not names.
_CAPITALISED = re.compile(r"(?<![.!?:]\s)(?<!^)\b(?!I\b|I'[a-z]+\b)[A-Z][\w'-]*")
_NAMING = re.compile(r"\b(?:called|named|name\s+is|name's|names\s+are)\s+\w", re.IGNORECASE)
#: "Speaker: " labels at the start of a turn (imported transcripts) are not names said.
_LABEL = re.compile(r"^\s*[\w .'-]{1,40}:\s+")


def asks_for_name(question: str) -> bool:
    """Whether ``question`` asks for a name ("what's my dentist's name?", "what is my cat
    called?", "who is my doctor?")."""
    return _ASKS_NAME.search(question) is not None


def names_something(text: str) -> bool:
    """Whether ``text`` gives a name: a capitalised word after its first, or a word after
    "called" / "named" / "name is"."""
    body = _LABEL.sub("", text, count=1)
    return _NAMING.search(body) is not None or _CAPITALISED.search(body) is not None


def can_answer(question: str, fact_text: str) -> bool:
    """Whether a fact of ``fact_text`` could answer ``question`` by the kind of answer it
    asks for (only names are checked: any fact can answer other questions)."""
    return not asks_for_name(question) or names_something(fact_text)
