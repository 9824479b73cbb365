"""What an agent adds to its user's messages is not the user.

Coding agents wrap what their user typed in scaffolding of their own: Claude Code's
``<system-reminder>`` blocks, Codex's ``<environment_context>`` and ``# AGENTS.md
instructions`` messages, IDE context... Kept byte for byte on the wire, it must never be
read as what the user said: not as the recall query, not as a stored episode or fact, not
as a ``mem:`` command.

An agent profile (:class:`memtap.protocol.anchors.AgentProfile`) may say what its scaffolding is
with an optional method ``user_text(message) -> str``: the text of a user or tool message
as its author wrote it. :func:`own_view` applies it to a request's messages, in one place
for every reader (injection, capture, commands), in the proxy and in-process alike.
:class:`TaggedScaffolding` is the usual implementation: scaffolding made of tagged blocks.
An agent whose scaffolding is whole turns (aider's few-shot examples and their "Ok."
answers) says so with ``own_messages(messages) -> messages`` instead.

Two more questions have one answer each here: whether a request is the agent's own side
call (:func:`is_side_call`: a title, a summary, a memory extraction, neither injected into
nor stored as conversation), and whether a request no profile knows looks like an agent's
(:func:`looks_like_agent`: it is then read conservatively).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from memtap.protocol.model import Message
from memtap.protocol.wire import RequestView

__all__ = ["TaggedScaffolding", "is_side_call", "looks_like_agent", "own_messages", "own_view"]

#: A system prompt at least this long is an agent's (an app's instructions are shorter;
#: the agents measured send 1-23 kB, aider's shortest being 1.1 kB plus few-shot turns).
AGENT_SYSTEM_CHARS = 3000
#: Tags only agents put around their user's words.
#: No headers, no body: what a side call is asked about when the caller has none.
_NOTHING: Mapping[str, Any] = types.MappingProxyType({})
AGENT_TAGS = ("<system-reminder>", "<environment_context>", "<environment_details>")


def _user_text(profile: Any) -> Callable[[Message], str] | None:
    """The profile's ``user_text`` method, or ``None`` (a profile without it, or none)."""
    method = getattr(profile, "user_text", None)
    return method if callable(method) else None


def own_messages(profile: Any, messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` as their authors wrote them: the user and tool messages through the
    profile's ``user_text``; a user message that was nothing but scaffolding is left out.
    The very tuple given when nothing changes (and without a profile that knows any).
    A profile with ``own_messages(messages)`` decides itself (its scaffolding is whole
    turns)."""
    given = messages if isinstance(messages, tuple) else tuple(messages)
    whole = getattr(profile, "own_messages", None)
    if callable(whole):
        found = tuple(whole(given))
        return given if found == given else found
    clean = _user_text(profile)
    if clean is None:
        return given
    out: list[Message] = []
    changed = False
    for m in given:
        if m.role == "assistant":
            out.append(m)
            continue
        text = clean(m)
        if text == m.content:
            out.append(m)
            continue
        changed = True
        if m.role == "user" and not text.strip() and not m.tool_calls:
            continue
        out.append(attrs.evolve(m, content=text))
    return tuple(out) if changed else given


def own_view(profile: Any, view: RequestView) -> RequestView:
    """``view`` with its messages as their authors wrote them (:func:`own_messages`);
    the very view given when nothing changes."""
    messages = own_messages(profile, view.messages)
    return view if messages is view.messages else attrs.evolve(view, messages=messages)


def is_side_call(
    profile: Any,
    view: RequestView,
    headers: Mapping[str, str] = _NOTHING,
    body: Mapping[str, Any] = _NOTHING,
) -> bool:
    """Whether ``view`` (the request as its agent sent it; ``headers`` with lower-case
    names, ``body`` parsed) is one of the agent's side calls (titles, summaries, memory
    extraction, model routing...): the profile's optional ``side_call(view, headers, body)``
    says; without one, no request is."""
    method = getattr(profile, "side_call", None)
    return bool(method(view, headers, body)) if callable(method) else False


def looks_like_agent(body: Mapping[str, Any], view: RequestView) -> bool:
    """Whether a request no profile recognised looks like a coding agent's: it offers
    tools, has a long system prompt, or wraps its user's words in an agent's tags."""
    if body.get("tools"):
        return True
    if view.system and len(view.system) >= AGENT_SYSTEM_CHARS:
        return True
    return any(tag in m.content for m in view.messages if m.role == "user" for tag in AGENT_TAGS)


_BLANK_LINES = re.compile(r"\n{3,}")


class TaggedScaffolding:
    """Scaffolding made of tagged blocks: every ``<tag ...>...</tag>`` element of the
    named ``tags``, and every block that opens with one of ``headed``'s headings and runs
    to its closing text (Codex's ``# AGENTS.md instructions for <dir>`` followed by
    ``<INSTRUCTIONS>...</INSTRUCTIONS>``), wherever it stands in a message. An element
    that is never closed is kept (it may be the user's own text).

    Cheap on long texts (an agent resends its whole conversation every turn): one regular
    expression pass finds whether a text holds any opening; only then is it rewritten.
    """

    def __init__(self, tags: Sequence[str] = (), headed: Sequence[tuple[str, str]] = ()) -> None:
        self.tags = tuple(tags)
        self.headed = tuple(headed)
        # Headed blocks first: their closing text may be a tag of their own.
        patterns = {
            heading: re.compile(rf"{re.escape(heading)}[^\n]*\n.*?{re.escape(closing)}\s*", re.DOTALL)
            for heading, closing in self.headed
        }
        for t in self.tags:
            patterns[f"<{t}"] = re.compile(rf"<{re.escape(t)}(?:\s[^>]*)?>.*?</{re.escape(t)}>\s*", re.DOTALL)
        self._patterns = tuple(patterns.items())
        # One pass over a text finds whether any opening is in it at all.
        self._any = re.compile("|".join(re.escape(o) for o in patterns) or "(?!)")

    def cut(self, text: str) -> str:
        """``text`` without the scaffolding blocks (surrounding blank lines trimmed)."""
        if self._any.search(text) is None:
            return text
        out = text
        removed = 0
        for opening, pattern in self._patterns:
            if opening in out:
                out, n = pattern.subn("", out)
                removed += n
        return _BLANK_LINES.sub("\n\n", out).strip() if removed else text

    def user_text(self, message: Message) -> str:
        """The message's text without the scaffolding blocks."""
        return self.cut(message.content)
