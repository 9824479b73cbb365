"""aider's traffic: a conversation framed by turns aider writes itself.

Measured on aider 0.86.2's real requests. Around what its user typed, aider sends: few-shot
example turns (for models it does not know, as user/assistant pairs closed by "I switched
to a new code base..." / "Ok."), a pair per context it shares (files added to the chat,
read-only files, the repository map, "I am not sharing any files..." / "Ok."), its edit
format's reminder appended to the last user message, and history restored from
``.aider.chat.history.md`` with trailing whitespace. None of that is the user's; aider names
no session in its traffic.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import attrs

from memtap.sdk import Message, RequestView

#: What closes aider's few-shot example turns (everything before it is an example).
EXAMPLES_END = (
    "I switched to a new code base. Please don't consider the above files or try to edit them any longer."
)
#: How the user turns aider writes to share context begin (each is followed by aider's own
#: assistant reply, "Ok." or a sentence).
CONTEXT_TURNS = (
    "I have *added these files to the chat*",
    "These files have been *added these files to the chat*",
    "These are some files we have been discussing",
    "Here is the current content of the file",
    "I am not sharing any files",
    "I am not sharing the full contents of any files",
    "Don't try and edit any existing code without asking me to add the files to the chat!",
    "Here are summaries of some files present in my git repository.",
    "I am working with you on code in a git repository.",
    "Here are some READ ONLY files",
    "Act as an expert ",  # the system prompt as a user turn, for models without one
)
#: An edit format's reminder appended to the last user message (``"\n\n" + reminder``).
_REMINDER = re.compile(
    r"\n\n\s*(?:# \*SEARCH/REPLACE block\* Rules:"
    r"|To suggest changes to a file you MUST return the entire content"
    r"|# File editing rules:|# V4A Diff Format Rules:|ONLY return code using the `|NEVER RETURN CODE!).*\Z",
    re.DOTALL,
)
#: aider's own calls: commit messages and summaries of a long chat (by the weak model).
SIDE_CALLS = (
    "You are an expert software engineer that generates concise",
    "*Briefly* summarize this partial conversation",
)
#: The first lines of aider's system prompts (one per edit format or chat mode).
FINGERPRINTS = (
    "Act as an expert software developer",
    "Act as an expert code analyst",
    "Act as an expert architect",
)


def _is_context(message: Message) -> bool:
    return message.role == "user" and message.content.startswith(CONTEXT_TURNS)


def own_messages(messages: Sequence[Message]) -> tuple[Message, ...]:
    """aider's request messages as their authors wrote them: examples, context pairs and
    reminders left out, the whitespace of restored history trimmed."""
    start = 0
    for i, m in enumerate(messages):
        if m.role == "user" and m.content == EXAMPLES_END:
            start = i + 1
    out: list[Message] = []
    skip_reply = start > 0  # the examples' closing "Ok."
    for m in messages[start:]:
        if m.role == "assistant" and skip_reply and not m.tool_calls:
            skip_reply = False
            continue
        skip_reply = False
        if _is_context(m):
            skip_reply = True
            continue
        text = _REMINDER.sub("", m.content) if m.role == "user" else m.content
        text = text.strip()
        if m.role == "user" and not text:
            continue
        out.append(m if text == m.content else attrs.evolve(m, content=text))
    return tuple(out)


def is_side_call(view: RequestView) -> bool:
    """A commit message or a chat summary, asked of aider's weak model."""
    system = (view.system or "").lstrip()
    return system.startswith(SIDE_CALLS) or any(
        m.role == "user" and m.content.lstrip().startswith(SIDE_CALLS) for m in view.messages[:1]
    )


def session(messages: Sequence[Message]) -> str | None:
    """aider's session, named after the first turn its user typed (``messages``: the
    request's own messages, :func:`own_messages`). ``--restore-chat-history`` resends it,
    so a restored chat lands in its session; two runs opened with the very same words
    share one."""
    first = next((m for m in messages if m.role == "user"), None)
    if first is None:
        return None
    digest = hashlib.blake2b(first.content.encode("utf-8", "replace"), digest_size=8).hexdigest()
    return f"aider-{digest}"
