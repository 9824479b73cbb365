"""Anchor strategies: where in a given agent's system prompt an injected block belongs.

An injector says *what kind* of place it wants — a semantic slot (``"memory"``,
``"skills"``...) and a relation to it (``before``, ``after``, ``inside_prepend``,
``inside_append``) — plus a coarse fallback point (one of :data:`INJECTION_POINTS`). An
:class:`AgentProfile` (found through the ``memtap_agent_profiles`` hook) knows one agent's
prompt: it recognises the agent, splits its system prompt into segments that join back to
the very same text, and resolves slots to segments. :func:`place` puts blocks at their
anchors and returns the ones no segment matched, to go to their fallback point; each
fallback is recorded on the current span (event ``memtap.anchor.fallback``).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Protocol, cast, runtime_checkable

import attrs
from opentelemetry import trace

#: Semantic slots an injector may ask for.
SLOTS = ("persona", "tools", "skills", "memory", "knowledge", "rules", "task_context")
#: Where a block goes relative to its slot's segment.
RELATIONS = ("before", "after", "inside_prepend", "inside_append")
#: The nine coarse injection points (seed 001), in execution order; the fallback of a block
#: whose slot the agent's prompt does not have.
INJECTION_POINTS = (
    "system.prefix",
    "system.before_tools",
    "system.after_tools",
    "system.suffix",
    "tools.prepend",
    "tools.append",
    "user.first_turn",
    "user.before",
    "user.after",
)
#: Hook priorities (lower runs, and is placed, first).
PRIORITY = {"system": 0, "memory": 100, "skill": 200, "wiki": 300, "custom": 1000}


@attrs.frozen
class Segment:
    """A piece of a system prompt: ``key`` names it (a heading, a tag; ``None`` for text
    outside any named part); ``text`` is its exact text, line breaks included.

    ``inner`` is the span of its content inside ``text`` (where ``inside_prepend`` and
    ``inside_append`` insert: between an XML element's tags, say); ``None`` means after its
    first line and before its trailing line breaks (a Markdown section).
    """

    text: str
    key: str | None = None
    inner: tuple[int, int] | None = None


@attrs.frozen
class Anchor:
    """Where one block wants to go: ``slot`` + ``relation``, else ``point``."""

    slot: str = "memory"
    relation: str = "inside_append"
    point: str = "system.suffix"
    priority: int = 100

    def __attrs_post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"anchor relation must be one of {RELATIONS}, got {self.relation!r}")
        if self.point not in INJECTION_POINTS:
            raise ValueError(f"anchor point must be one of {INJECTION_POINTS}, got {self.point!r}")


@runtime_checkable
class AgentProfile(Protocol):
    """One agent's system-prompt structure.

    Optional, read with ``getattr`` (a profile without them keeps working):

    - ``user_text(message) -> str``: a user or tool message's text without the agent's
      scaffolding (:mod:`memtap.formats.scaffolding`), for the recall query, capture and ``mem:``
      commands;
    - ``own_messages(messages) -> messages``: instead of ``user_text``, for an agent whose
      scaffolding is whole turns (aider's few-shot examples): the messages as their authors
      wrote them, the scaffolding turns left out;
    - ``side_call(view, headers, body) -> bool``: whether a request (its view, its headers
      with lower-case names, its parsed body) is one of the agent's side calls (titles,
      summaries, memory extraction, model routing, checks): the proxy passes it through,
      neither injected into nor stored (:func:`memtap.formats.scaffolding.is_side_call`);
    - ``session_id(headers, body) -> str | None``: the conversation id the agent sends in
      its own traffic (``headers``: lower-case names to their first value; ``body``: the
      parsed request), read by the proxy when no ``x-memtap-session`` header names one;
    - ``entity_id(headers, body) -> str | None``: the same for the entity (whose memory);
    - ``keeps_conversation``: ``True`` for an agent that resends its whole conversation
      every turn (Claude Code, Codex): memtap then injects no history into the sessions
      the agent names itself, only recalled facts;
    - ``detect_headers(headers) -> bool``: whether a request's headers say it is this
      agent's, for the proxy when no prefix or system prompt does (a side call's own
      prompt names no agent).
    """

    #: The agent's name, also its URL prefix in the proxy (``/claude-code/v1/messages``).
    name: str

    def detect(self, system_text: str) -> bool:
        """Whether ``system_text`` is this agent's (a cheap fingerprint)."""

    def split(self, system_text: str) -> list[Segment]:
        """Segments whose texts join to exactly ``system_text``."""

    def resolve(self, slot: str) -> str | None:
        """The key of the segment holding ``slot``, or ``None`` when the agent has none."""


def rebuild(segments: Sequence[Segment]) -> str:
    """The text the segments were split from."""
    return "".join(s.text for s in segments)


def detect_profile(
    profiles: Sequence[AgentProfile], system_text: str | None, *, name: str | None = None
) -> AgentProfile | None:
    """The profile named ``name`` (a URL prefix), else the first whose fingerprint matches."""
    if name is not None:
        for profile in profiles:
            if profile.name == name:
                return profile
    if system_text:
        for profile in profiles:
            if profile.detect(system_text):
                return profile
    return None


def _offset(segment: Segment, relation: str) -> int:
    """Where, inside ``segment.text``, a block with ``relation`` goes."""
    if relation == "before":
        return 0
    if relation == "after":
        return len(segment.text)
    if segment.inner is not None:
        return segment.inner[0] if relation == "inside_prepend" else segment.inner[1]
    text = segment.text
    if relation == "inside_prepend":
        newline = text.find("\n")
        return len(text) if newline < 0 else newline + 1
    return len(text.rstrip("\r\n"))


def _insert_all(text: str, inserts: list[tuple[int, int, str]]) -> str:
    """``text`` with each ``(position, order, block)`` inserted as its own line: the block
    and a line break at the start of a line, else a line break and the block. Either way
    the app's text around it is unchanged, and removing the block (with the line break
    after it when one follows, else the one before it) gives ``text`` back."""
    pieces: list[str] = []
    at = 0
    for position, _, block in sorted(inserts, key=lambda i: (i[0], i[1])):
        pieces.append(text[at:position])
        line_start = position == 0 or text[position - 1] == "\n"
        pieces.append(block + "\n" if line_start else "\n" + block)
        at = position
    pieces.append(text[at:])
    return "".join(pieces)


@attrs.frozen
class Placed:
    """What :func:`place` did: the new system text and the blocks left for their points."""

    text: str
    fallback: tuple[tuple[Anchor, str], ...] = ()


@attrs.frozen
class PlacedTexts:
    """What :func:`place_texts` did: the new texts (one per text given, the same string
    where nothing was placed) and the blocks left for their points (the very tuples
    given)."""

    texts: tuple[str, ...]
    fallback: tuple[tuple[Anchor, str], ...] = ()


@functools.lru_cache(maxsize=64)
def _split_cached(profile: Hashable, text: str) -> tuple[Segment, ...]:
    return tuple(cast(AgentProfile, profile).split(text))


def _split(profile: AgentProfile, text: str) -> tuple[Segment, ...]:
    """``profile.split(text)``, remembered: an agent sends the same long system prompt
    every turn, and splitting it costs more than the rest of the request path."""
    try:
        return _split_cached(cast(Hashable, profile), text)
    except TypeError:  # an unhashable profile object
        return tuple(profile.split(text))


def place_texts(
    profile: AgentProfile, texts: Sequence[str], blocks: Sequence[tuple[Anchor, str]]
) -> PlacedTexts:
    """Put each ``(anchor, text)`` at its slot in a system prompt made of several texts
    (an Anthropic ``system`` block list, several system messages), in priority order.

    Each text is split by ``profile`` on its own; a slot resolves to the first segment with
    its key, whichever text holds it. Blocks whose slot the profile cannot resolve (or
    whose segment is absent) are returned in :attr:`PlacedTexts.fallback`, each recorded as
    a ``memtap.anchor.fallback`` event on the current span. The app's text is kept byte for
    byte: blocks are only inserted between or inside its segments.
    """
    located: list[tuple[int, int, Segment]] = []
    for index, text in enumerate(texts):
        at = 0
        for segment in _split(profile, text):
            located.append((index, at, segment))
            at += len(segment.text)
    inserts: list[list[tuple[int, int, str]]] = [[] for _ in texts]
    fallback: list[tuple[Anchor, str]] = []
    span = trace.get_current_span()
    for order, block in enumerate(sorted(blocks, key=lambda b: b[0].priority)):
        anchor, text = block
        key = profile.resolve(anchor.slot)
        hit = None if key is None else next((loc for loc in located if loc[2].key == key), None)
        if hit is None:
            fallback.append(block)  # the very tuple given: callers may look it up
            span.add_event(
                "memtap.anchor.fallback",
                {"memtap.agent": profile.name, "memtap.slot": anchor.slot, "memtap.point": anchor.point},
            )
            continue
        index, start, segment = hit
        inserts[index].append((start + _offset(segment, anchor.relation), order, text))
    placed = tuple(_insert_all(t, i) if i else t for t, i in zip(texts, inserts))
    return PlacedTexts(placed, tuple(fallback))


def place(profile: AgentProfile, system_text: str, blocks: Sequence[tuple[Anchor, str]]) -> Placed:
    """Put each ``(anchor, text)`` at its slot in ``system_text`` (by priority); the blocks
    whose slot the profile cannot resolve (or whose segment is absent) are returned in
    :attr:`Placed.fallback` and traced. The app's text is kept byte for byte: only new
    text is inserted between or inside its segments (see :func:`place_texts`)."""
    placed = place_texts(profile, [system_text], blocks)
    return Placed(placed.texts[0], placed.fallback)
