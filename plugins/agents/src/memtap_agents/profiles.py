"""The profiles: Markdown-sectioned prompts, XML-tagged prompts, and plain text, each
with what its agent's traffic says (session ids, scaffolding) when known."""

from __future__ import annotations

import functools
import re
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from memtap.sdk import Message, RequestView, Segment

from . import aider
from .traffic import (
    CLAUDE_CODE_SCAFFOLDING,
    CODEX_SCAFFOLDING,
    GEMINI_CLI_FINGERPRINTS,
    GEMINI_CLI_SCAFFOLDING,
    GENERIC_SCAFFOLDING,
    QWEN_CODE_SCAFFOLDING,
    chat_messages,
    claude_code_session,
    codex_session,
    gemini_cli_side_call,
    is_gemini_cli,
    opencode_session,
    qwen_code_session,
)

#: Reads an agent's session id from a request's headers (lower-case names) and body.
SessionReader = Callable[[Mapping[str, str], Mapping[str, Any]], "str | None"]
#: Tells an agent's side calls (routing, checks, summaries) from its conversation by
#: their headers (lower-case names) and body, for an agent whose side calls no marker in
#: the system prompt tells.
SideCallReader = Callable[[Mapping[str, str], Mapping[str, Any]], bool]
#: Knows an agent's requests by their headers (lower-case names).
HeaderReader = Callable[[Mapping[str, str]], bool]


class Scaffolding(Protocol):
    """What cuts an agent's scaffolding out of a text (:class:`memtap.sdk.TaggedScaffolding`)."""

    def cut(self, text: str) -> str:
        """``text`` without the scaffolding."""


#: How far into a system prompt a side call's marker is looked for.
SIDE_CALL_HEAD = 400
#: No headers, no body (a side call asked about by its view alone).
_NOTHING: Mapping[str, Any] = types.MappingProxyType({})

#: Texts up to this long are cut once and remembered: an agent resends its whole
#: conversation on every request (a longer text is cut again; its hash would cost as much
#: as the one search that finds most texts hold no scaffolding).
CUT_MEMO_CHARS = 32768

#: The key of the text before a prompt's first section (its persona, usually).
PREAMBLE = "_preamble"
_FENCE = re.compile(r"^\s*(```|~~~)")


class _Traffic:
    """What a profile knows of its agent's traffic (the optional part of
    :class:`memtap.sdk.AgentProfile`): its scaffolding, where it names its session,
    whether it resends its whole conversation every turn, which of its requests are side
    calls, and how its headers name it."""

    def __init__(
        self,
        *,
        scaffolding: Scaffolding | None = None,
        session: SessionReader | None = None,
        keeps_conversation: bool = False,
        side_calls: tuple[str, ...] = (),
        side_call: SideCallReader | None = None,
        by_headers: HeaderReader | None = None,
    ) -> None:
        self.scaffolding = scaffolding
        self._session = session
        self._side_call = side_call
        self._by_headers = by_headers
        self.keeps_conversation = keeps_conversation
        #: How the agent's side calls' system prompts begin (titles, summaries...).
        self.side_calls = side_calls
        self._cut_memo = functools.lru_cache(maxsize=256)(scaffolding.cut) if scaffolding else None

    def user_text(self, message: Message) -> str:
        """The message's text without the agent's scaffolding."""
        text = message.content
        if self.scaffolding is None or self._cut_memo is None:
            return text
        return self._cut_memo(text) if len(text) <= CUT_MEMO_CHARS else self.scaffolding.cut(text)

    def session_id(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """The session the agent names in its request, if it names one."""
        return None if self._session is None else self._session(headers, body)

    def side_call(
        self,
        view: RequestView,
        headers: Mapping[str, str] = _NOTHING,
        body: Mapping[str, Any] = _NOTHING,
    ) -> bool:
        """Whether the request is one of the agent's side calls (neither injected into
        nor captured as conversation): its prompt carries a side call's marker
        (:meth:`marked_side_call`), or the profile's side-call reader says so from its
        headers and body."""
        if self.marked_side_call(view):
            return True
        return self._side_call is not None and self._side_call(headers, body)

    def marked_side_call(self, view: RequestView) -> bool:
        """Whether the request's system prompt opens with one of :attr:`side_calls` (what
        also tells the agent by a side call's prompt, :meth:`detect`)."""
        if not self.side_calls or not view.system:
            return False
        head = view.system[:SIDE_CALL_HEAD]
        return any(marker in head for marker in self.side_calls)

    def detect_headers(self, headers: Mapping[str, str]) -> bool:
        """Whether the request's headers say it is this agent's (for a side call, whose
        system prompt is not the agent's own)."""
        return self._by_headers is not None and self._by_headers(headers)


class _FingerprintedProfile(_Traffic):
    """What the Markdown and XML profiles share: a name, recognition by fingerprints in
    the prompt's head, and a slot -> section key table."""

    def __init__(
        self,
        name: str,
        fingerprints: tuple[str, ...],
        slots: Mapping[str, str],
        **traffic: Any,
    ) -> None:
        super().__init__(**traffic)
        self.name = name
        self._fingerprints = fingerprints
        self._slots = dict(slots)

    def detect(self, system_text: str) -> bool:
        """Whether a fingerprint appears in the prompt's first 4 kB (a side call's marker
        too: the agent's side calls are its own)."""
        head = system_text[:4096]
        return any(f in head for f in self._fingerprints) or self.marked_side_call(
            RequestView(system=system_text)
        )

    def resolve(self, slot: str) -> str | None:
        """The section key (heading text, tag name) for ``slot``."""
        return self._slots.get(slot)


class MarkdownProfile(_FingerprintedProfile):
    """A prompt made of Markdown sections at one heading level (``#`` or ``##``).

    Sections are keyed by heading text; the text before the first heading is
    :data:`PREAMBLE`. Headings inside fenced code blocks do not start a section.
    """

    def __init__(
        self,
        name: str,
        level: int,
        fingerprints: tuple[str, ...],
        slots: Mapping[str, str],
        **traffic: Any,
    ) -> None:
        super().__init__(name, fingerprints, slots, **traffic)
        self._heading = re.compile(r"^" + "#" * level + r" +(\S.*?)\s*$")

    def split(self, system_text: str) -> list[Segment]:
        """One segment per section (heading line included), the preamble first."""
        segments: list[Segment] = []
        current: list[str] = []
        key: str | None = PREAMBLE
        fenced = False
        for line in system_text.splitlines(keepends=True):
            if _FENCE.match(line):
                fenced = not fenced
            match = None if fenced else self._heading.match(line.rstrip("\r\n"))
            if match is not None:
                if current:
                    segments.append(Segment("".join(current), key))
                current, key = [], match.group(1)
            current.append(line)
        if current:
            segments.append(Segment("".join(current), key))
        return segments


class XmlProfile(_FingerprintedProfile):
    """A prompt made of top-level ``<tag>...</tag>`` blocks and text between them."""

    _TAG = re.compile(r"<([A-Za-z_][\w-]*)>.*?</\1>", re.DOTALL)

    def split(self, system_text: str) -> list[Segment]:
        """Tag blocks keyed by tag name (their content, between the tags, is where
        ``inside_*`` blocks go); the text around them unkeyed (the first such text is the
        :data:`PREAMBLE`)."""
        segments: list[Segment] = []
        at = 0
        for match in self._TAG.finditer(system_text):
            if match.start() > at:
                key = PREAMBLE if not segments else None
                segments.append(Segment(system_text[at : match.start()], key))
            element, tag = match.group(0), match.group(1)
            start = len(tag) + 2  # after <tag>, and after the line break that follows it
            start += element.startswith("\n", start)
            segments.append(Segment(element, tag, inner=(start, len(element) - len(tag) - 3)))
            at = match.end()
        if at < len(system_text):
            segments.append(Segment(system_text[at:], PREAMBLE if not segments else None))
        return segments


class PlainProfile(_Traffic):
    """Any other agent: the prompt is one segment and no slot resolves, so every block
    goes to its fallback point (what the wire protocols do by default). Attribution comes
    from ``x-memtap-*`` headers, the proxy's settings, or a session derived from the
    conversation.

    As ``generic``, it is what the proxy reads an unknown agent's request with (one that
    offers tools, has a long system prompt or wraps its user's words in reminders):
    conservatively, the usual agents' tags cut (:data:`GENERIC_SCAFFOLDING`) and its
    model's answers not kept as memories.
    """

    def __init__(self, name: str = "generic", fingerprints: tuple[str, ...] = (), **traffic: Any) -> None:
        super().__init__(**traffic)
        self.name = name
        self._fingerprints = fingerprints

    def detect(self, system_text: str) -> bool:
        """Whether a fingerprint (or a side call's marker) opens the prompt; the generic
        profile has none: it is the fallback."""
        head = system_text[:4096]
        return any(f in head for f in self._fingerprints) or self.marked_side_call(
            RequestView(system=system_text)
        )

    def split(self, system_text: str) -> list[Segment]:
        """The whole prompt."""
        return [Segment(system_text)] if system_text else []

    def resolve(self, slot: str) -> str | None:
        """No slot has a place."""
        return None


CLAUDE_CODE = MarkdownProfile(
    "claude-code",
    level=1,
    fingerprints=("You are Claude Code", "Claude Agent SDK"),
    scaffolding=CLAUDE_CODE_SCAFFOLDING,
    session=claude_code_session,
    keeps_conversation=True,
    slots={
        "persona": PREAMBLE,
        "skills": "Session-specific guidance",
        "memory": "Memory",
        "knowledge": "Memory",
        "rules": "Harness",
        "task_context": "Environment",
    },
)
CODEX = MarkdownProfile(
    "codex",
    level=2,
    fingerprints=("You are Codex", "Codex CLI"),
    scaffolding=CODEX_SCAFFOLDING,
    session=codex_session,
    keeps_conversation=True,
    slots={
        "persona": PREAMBLE,
        "rules": "AGENTS.md spec",
        "memory": "AGENTS.md spec",
        "task_context": "Task execution",
        "tools": "Tool guidelines",
    },
)
GEMINI_CLI = MarkdownProfile(
    "gemini-cli",
    level=1,
    fingerprints=GEMINI_CLI_FINGERPRINTS,
    scaffolding=GEMINI_CLI_SCAFFOLDING,
    # Gemini CLI names no session in its traffic: the proxy derives one from the
    # conversation's first prompt (its environment block cut), which --resume resends.
    keeps_conversation=True,
    side_call=gemini_cli_side_call,
    by_headers=is_gemini_cli,
    slots={
        "persona": PREAMBLE,
        "rules": "Core Mandates",
        "skills": "Available Agent Skills",
        "task_context": "Primary Workflows",
        "tools": "Operational Guidelines",
        "memory": "Final Reminder",
        "knowledge": "Final Reminder",
    },
)
CODEBUDDY = XmlProfile(
    "codebuddy",
    fingerprints=("CodeBuddy",),
    slots={
        "persona": PREAMBLE,
        "skills": "agent_skills",
        "memory": "memory",
        "knowledge": "knowledge",
        "rules": "rules",
        "tools": "tool_use",
        "task_context": "user_info",
    },
)


class AiderProfile(PlainProfile):
    """aider (:mod:`memtap_agents.aider`): a plain prompt, a conversation framed by turns
    aider writes itself (few-shot examples, context pairs, reminders), no session id."""

    def __init__(self) -> None:
        super().__init__(
            "aider",
            fingerprints=aider.FINGERPRINTS,
            side_calls=aider.SIDE_CALLS,
            session=self._aider_session,
            keeps_conversation=True,
        )

    def own_messages(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        """The messages aider's user and model wrote (:func:`memtap_agents.aider.own_messages`)."""
        return aider.own_messages(messages)

    def user_text(self, message: Message) -> str:
        """The message without aider's edit-format reminder."""
        found = aider.own_messages((message,))
        return found[0].content if found else ""

    def marked_side_call(self, view: RequestView) -> bool:
        """A commit message or a summary of the chat (:func:`memtap_agents.aider.is_side_call`)."""
        return aider.is_side_call(view)

    def _aider_session(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        return aider.session(aider.own_messages(chat_messages(body)))


class QuotedPrompt:
    """opencode's scaffolding: ``opencode run`` sends each argument that holds a space
    in double quotes (inner quotes escaped); the prompt is what is inside them."""

    def cut(self, text: str) -> str:
        """``text`` without the quotes ``opencode run`` put around it."""
        if len(text) < 2 or text[0] != '"' or text[-1] != '"':
            return text
        inner = text[1:-1]
        if re.search(r'(?<!\\)"', inner):  # several quoted arguments, or the user's quotes
            return text
        return inner.replace('\\"', '"')


QWEN_CODE = MarkdownProfile(
    "qwen-code",
    level=1,
    fingerprints=("You are Qwen Code",),
    scaffolding=QWEN_CODE_SCAFFOLDING,
    session=qwen_code_session,
    keeps_conversation=True,
    side_calls=(
        "You are now acting as the managed memory extraction subagent",
        "You are the component that summarizes a conversation",
        "You are a specialized context summarizer",
        "You are a security classifier for an AI coding agent",
    ),
    slots={
        "persona": PREAMBLE,
        "rules": "Core Mandates",
        "memory": "auto memory",
        "knowledge": "auto memory",
    },
)
OPENCODE = MarkdownProfile(
    "opencode",
    level=1,
    fingerprints=("You are opencode", "You are OpenCode"),
    scaffolding=QuotedPrompt(),
    session=opencode_session,
    keeps_conversation=True,
    side_calls=(
        "You are a title generator",
        "Summarize what was done in this conversation",
        "You are a context summarization agent",
    ),
    slots={"persona": PREAMBLE, "memory": "Memory", "knowledge": "Memory"},
)
AIDER = AiderProfile()
GENERIC = PlainProfile(scaffolding=GENERIC_SCAFFOLDING)
