"""Where one request's injected blocks go, for every wire protocol.

:func:`arrange` decides, block by block, between three places, and each protocol only
realises them in its own format:

- **inside the app's system text**, at the block's slot + relation, when the plan names an
  agent profile that resolves the slot (:func:`memtap.protocol.anchors.place_texts`; the app's text
  is kept byte for byte around the inserted block);
- **the end of the system text** (the fallback of every ``system.*`` and ``tools.*`` point:
  memtap inserts text, never tools, and never puts data before the app's own
  instructions), ``session_init`` blocks before ``per_turn`` ones;
- **the tail**: the latest user turn (the ``user.*`` points), and every block that is not
  ``session_init`` when the request uses the provider's prompt cache, so text that changes
  every turn never sits inside the cached prefix.

The rest of the module reads and edits the usual "string or list of text parts" content
without touching what it does not change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from opentelemetry import trace

from memtap.formats.blocks import render_blocks
from memtap.formats.content import TEXT_PART_TYPES
from memtap.protocol.anchors import Anchor, place_texts
from memtap.protocol.wire import InjectionPlan, SystemBlock

#: The cache strategy of blocks that stay the same all session.
STABLE = "session_init"


def split_cache(blocks: Iterable[SystemBlock]) -> tuple[list[SystemBlock], list[SystemBlock]]:
    """``(session_init blocks, the others)``, each in the given order."""
    stable: list[SystemBlock] = []
    volatile: list[SystemBlock] = []
    for block in blocks:
        (stable if block.cache == STABLE else volatile).append(block)
    return stable, volatile


def render_stable_first(blocks: Iterable[SystemBlock]) -> str:
    """One memory element for ``blocks``, the ``session_init`` ones first."""
    stable, volatile = split_cache(blocks)
    return render_blocks([*stable, *volatile])


@attrs.frozen
class Arrangement:
    """Where a plan's system blocks go in one request (made by :func:`arrange`).

    ``texts``: the app's system texts with the anchored blocks inside (the very strings
    given where nothing was placed). ``stable`` and ``volatile``: blocks for the end of the
    system text, in that order. ``tail``: blocks for the latest user turn.
    """

    texts: tuple[str, ...] = ()
    stable: tuple[SystemBlock, ...] = ()
    volatile: tuple[SystemBlock, ...] = ()
    tail: tuple[SystemBlock, ...] = ()

    def suffix(self) -> list[str]:
        """The rendered elements for the end of the system text: one for the
        ``session_init`` blocks, then one for the others (each only when there are any)."""
        return [render_blocks(group) for group in (self.stable, self.volatile) if group]

    def tail_text(self) -> str | None:
        """The rendered element for the latest user turn (``None``: nothing goes there)."""
        return render_stable_first(self.tail) if self.tail else None

    def tail_in_system(self) -> Arrangement:
        """The same, with the tail's blocks at the end of the system text instead (for a
        request without a user turn to put them in)."""
        if not self.tail:
            return self
        stable, volatile = split_cache(self.tail)
        return attrs.evolve(
            self,
            stable=(*self.stable, *stable),
            volatile=(*self.volatile, *volatile),
            tail=(),
        )


def arrange(
    plan: InjectionPlan, texts: Sequence[str] = (), *, cached: bool = False, system: bool = True
) -> Arrangement:
    """Decide where each of ``plan``'s system blocks goes (see the module docstring).

    ``texts`` are the app's system texts in order (the pieces a protocol can rewrite);
    ``cached`` says the request uses the provider's prompt cache (its own markers, a cache
    key): then only ``session_init`` blocks go into the system text. ``system=False`` says
    the request's system text must not change at all (a Gemini request on cached
    content): every block goes to the tail. Blocks sharing a slot and relation are placed
    as one element.
    """
    profile = plan.profile if system else None
    tail: list[SystemBlock] = []
    anchored: dict[tuple[str, str], list[SystemBlock]] = {}
    rest: list[SystemBlock] = []
    for block in plan.system_blocks:
        if not system or (cached and block.cache != STABLE):
            tail.append(block)
        elif profile is not None:
            anchored.setdefault((block.slot, block.relation), []).append(block)
        else:
            rest.append(block)
    placed = tuple(texts)
    placed_count = 0
    if profile is not None and anchored:
        groups = list(anchored.values())
        entries = [
            (
                Anchor(
                    slot=group[0].slot,
                    relation=group[0].relation,
                    point=group[0].point,
                    priority=min(b.priority for b in group),
                ),
                render_stable_first(group),
            )
            for group in groups
        ]
        result = place_texts(profile, texts, entries)
        placed = result.texts
        fallen = {id(entry) for entry in result.fallback}
        for entry, group in zip(entries, groups):
            if id(entry) in fallen:
                rest.extend(group)
            else:
                placed_count += len(group)
    at_end: list[SystemBlock] = []
    for block in rest:
        (tail if block.point.startswith("user.") else at_end).append(block)
    stable, volatile = split_cache(at_end)
    if plan.system_blocks:
        trace.get_current_span().add_event(
            "memtap.formats.placement",
            {
                "memtap.agent": profile.name if profile is not None else "",
                "memtap.prompt_cache": cached,
                "memtap.formats.blocks.anchored": placed_count,
                "memtap.formats.blocks.system": len(at_end),
                "memtap.formats.blocks.tail": len(tail),
            },
        )
    return Arrangement(texts=placed, stable=tuple(stable), volatile=tuple(volatile), tail=tuple(tail))


# -- content: a string, or a list of parts ---------------------------------------------------


def is_text_part(part: Any) -> bool:
    """Whether ``part`` is a text part (``{"type": "text", "text": ...}``, Bedrock's and
    Gemini's ``{"text": ...}``, Responses' ``input_text``; not a model's thought)."""
    if not isinstance(part, Mapping) or not isinstance(part.get("text"), str) or part.get("thought"):
        return False
    kind = part.get("type")
    return kind is None or kind in TEXT_PART_TYPES


def content_texts(content: Any) -> list[str]:
    """The texts of a string-or-parts content, one per text part (a string is one)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [part["text"] for part in content if is_text_part(part)]
    return []


def with_texts(content: Any, texts: Sequence[str]) -> Any:
    """``content`` with its texts (as :func:`content_texts` reads them) replaced by
    ``texts``: the same shape, each changed part copied with its keys in order, every
    other part (and ``content`` itself when nothing changed) the very object given."""
    if isinstance(content, str):
        return texts[0] if texts else content
    if not isinstance(content, list):
        return content
    remaining = iter(texts)
    out: list[Any] = []
    changed = False
    for part in content:
        if is_text_part(part):
            new = next(remaining, part["text"])
            if new != part["text"]:
                part = {**part, "text": new}
                changed = True
        out.append(part)
    return out if changed else content


def regroup(texts: Sequence[str], counts: Sequence[int]) -> list[list[str]]:
    """``texts`` cut back into consecutive groups of ``counts`` (undoing a flattening)."""
    out: list[list[str]] = []
    at = 0
    for n in counts:
        out.append(list(texts[at : at + n]))
        at += n
    return out


def text_part(text: str) -> dict[str, Any]:
    """A ``{"type": "text", "text": ...}`` part."""
    return {"type": "text", "text": text}


def append_text(content: Any, text: str, part: Callable[[str], Any] = text_part) -> Any:
    """``content`` with ``text`` added at its end: a list gets one more part (the app's
    parts kept as they are), a string stays a string (``text`` after a blank line)."""
    if isinstance(content, list):
        return [*content, part(text)]
    if isinstance(content, str) and content:
        return f"{content}\n\n{text}"
    return text


def with_system(
    system: Any, arranged: Arrangement, part: Callable[[str], Any] = text_part, *, as_list: bool = False
) -> Any:
    """The app's system text (``None``, a string, or a list of parts) with ``arranged``'s
    anchored blocks inside and its suffix at the end: a list gets one more part per
    rendered element (after the app's parts and cache breakpoints, which stay as they
    were), a string stays a string (the elements after a blank line), no system becomes
    the elements' text (a list of parts with ``as_list``). The very value given when
    nothing changes."""
    system = with_texts(system, arranged.texts)
    suffix = arranged.suffix()
    if not suffix:
        return system
    if isinstance(system, list) or (system is None and as_list):
        return [*(system or ()), *(part(t) for t in suffix)]
    return "\n\n".join([system, *suffix] if isinstance(system, str) and system else suffix)


def with_tail(
    turns: Sequence[Any],
    text: str,
    *,
    is_user: Callable[[Any], bool],
    key: str = "content",
    part: Callable[[str], Any] = text_part,
) -> list[Any] | None:
    """``turns`` with ``text`` at the end of the latest user turn's ``key`` content (see
    :func:`append_text`; the turn is copied, the others kept), or ``None`` when no turn is
    the user's."""
    index = last_index(turns, is_user)
    if index is None:
        return None
    out = list(turns)
    turn = out[index]
    out[index] = {**turn, key: append_text(turn.get(key), text, part)}
    return out


def is_user_turn(turn: Any) -> bool:
    """Whether a message is the user's (``role: user``)."""
    return isinstance(turn, Mapping) and turn.get("role") == "user"


def inject_blocks(
    out: dict[str, Any],
    body: Mapping[str, Any],
    plan: InjectionPlan,
    *,
    cached: bool,
    part: Callable[[str], Any] = text_part,
    system_key: str = "system",
    system_as_list: bool = False,
    is_tail: Callable[[Any], bool] = is_user_turn,
) -> None:
    """Place ``plan``'s system blocks into ``out`` (a copy of ``body`` whose ``messages``
    may already carry the history) for APIs with a ``system`` field apart from the
    ``messages`` (Anthropic Messages, Bedrock Converse and Anthropic-on-Bedrock):

    - a known agent's anchored blocks inside the app's system text (the text of a string
      system or of its text parts, every other key kept);
    - the rest at the end of the system (:func:`with_system`: after the app's last cache
      breakpoint, every existing part kept as it was);
    - the tail (the ``user.*`` points, and per-turn blocks when ``cached`` says the request
      uses the prompt cache) at the end of the latest user message (after its tool results
      and its breakpoint, so nothing in the cached prefix changes; ``is_tail`` says which
      turns may take it, the last one that does is used); in the system when there is no
      such turn.
    """
    system = body.get(system_key)
    arranged = arrange(plan, content_texts(system), cached=cached)
    tail = arranged.tail_text()
    if tail is not None:
        messages = with_tail(out.get("messages") or (), tail, is_user=is_tail, part=part)
        if messages is None:
            arranged = arranged.tail_in_system()
        else:
            out["messages"] = messages
    placed = with_system(system, arranged, part, as_list=system_as_list)
    if placed is not system:
        out[system_key] = placed


def last_index(items: Sequence[Any], predicate: Callable[[Any], bool]) -> int | None:
    """The index of the last item matching ``predicate``, or ``None``."""
    for i in range(len(items) - 1, -1, -1):
        if predicate(items[i]):
            return i
    return None


def marks(key: str, *lists: Any) -> bool:
    """Whether ``key`` is set on an item of one of ``lists`` or on a part of an item's
    ``content`` list (a prompt-cache marker such as ``cache_control``; searched from the
    end of each list, where breakpoints usually are)."""
    for items in lists:
        if not isinstance(items, list):
            continue
        for item in reversed(items):
            if not isinstance(item, Mapping):
                continue
            if key in item:
                return True
            content = item.get("content")
            if isinstance(content, list) and any(isinstance(p, Mapping) and key in p for p in content):
                return True
    return False
