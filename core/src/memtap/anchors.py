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

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

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
    outside any named part); ``text`` is its exact text, line breaks included."""

    text: str
    key: str | None = None


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
    """One agent's system-prompt structure."""

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


def _insert(segment: Segment, relation: str, text: str) -> list[Segment]:
    if relation == "before":
        return [Segment(text + "\n\n"), segment]
    if relation == "after":
        body = segment.text
        sep = "" if body.endswith("\n") else "\n"
        return [segment, Segment(sep + text + "\n")]
    if relation == "inside_prepend":
        head, newline, rest = segment.text.partition("\n")
        return [Segment(head + newline + text + "\n" + rest, segment.key)]
    body = segment.text.rstrip("\n")
    tail = segment.text[len(body) :] or "\n"
    return [Segment(body + "\n" + text + tail, segment.key)]


@attrs.frozen
class Placed:
    """What :func:`place` did: the new system text and the blocks left for their points."""

    text: str
    fallback: tuple[tuple[Anchor, str], ...] = ()


def place(profile: AgentProfile, system_text: str, blocks: Sequence[tuple[Anchor, str]]) -> Placed:
    """Put each ``(anchor, text)`` at its slot in ``system_text`` (by priority); the blocks
    whose slot the profile cannot resolve (or whose segment is absent) are returned in
    :attr:`Placed.fallback` and traced. The app's text is kept byte for byte: only new
    text is inserted between or inside its segments."""
    segments = profile.split(system_text)
    fallback: list[tuple[Anchor, str]] = []
    span = trace.get_current_span()
    for anchor, text in sorted(blocks, key=lambda b: b[0].priority):
        key = profile.resolve(anchor.slot)
        index = next((i for i, s in enumerate(segments) if key is not None and s.key == key), None)
        if index is None:
            fallback.append((anchor, text))
            span.add_event(
                "memtap.anchor.fallback",
                {"memtap.agent": profile.name, "memtap.slot": anchor.slot, "memtap.point": anchor.point},
            )
            continue
        segments[index : index + 1] = _insert(segments[index], anchor.relation, text)
    return Placed(rebuild(segments), tuple(fallback))
