"""Session-stable blocks: what keeps a provider's prompt cache hitting turn after turn.

A ``session_init`` block is computed once per session and then injected with the very
same bytes every turn of that session, even when what it was computed from changes
meanwhile: :class:`SessionBlocks` keeps the first block of each ``source`` + ``slot`` per
session (entity, process, session) in a small LRU. A ``hybrid`` block is kept the same way,
and each turn's fresh block adds, as a ``per_turn`` block, only the facts the kept one
lacks. No per-turn block repeats a fact a kept block already carries (by fact id when the
blocks have them, else by list-item line).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable

import attrs

from memtap.protocol.model import Attribution
from memtap.protocol.normalise import normalise
from memtap.protocol.wire import InjectionPlan, SystemBlock

_SessionKey = tuple[str, str | None, str]
_BlockKey = tuple[str, str, int]

#: A list-item line: ``- x``, ``* x``, ``• x``, ``1. x``, ``2) x``.
_ITEM = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+\S")


@attrs.frozen
class Known:
    """The facts some blocks carry: their fact ids and their normalised lines."""

    ids: frozenset[str] = frozenset()
    lines: frozenset[str] = frozenset()

    @classmethod
    def of(cls, blocks: Iterable[SystemBlock]) -> Known:
        """What ``blocks`` carry."""
        ids: set[str] = set()
        lines: set[str] = set()
        for block in blocks:
            ids.update(i for i in block.fact_ids if i)
            lines.update(normalise(line) for line in block.text.split("\n") if line.strip())
        return cls(frozenset(ids), frozenset(lines))


def without_known(block: SystemBlock, known: Known) -> SystemBlock | None:
    """``block`` without the facts ``known`` already holds; ``None`` when none is left.

    A fact is a line with a fact id, or (without ids) a list-item line — every non-empty
    line when the block has no list items. Other lines (a header) stay with the facts left.
    """
    lines = block.text.split("\n")
    ids = block.fact_ids or ("",) * len(lines)
    items = any(_ITEM.match(line) for line in lines)
    kept: list[tuple[str, str]] = []
    facts_left = 0
    dropped = False
    for line, fact_id in zip(lines, ids):
        if block.fact_ids:
            is_fact = bool(fact_id)
        else:
            is_fact = bool(_ITEM.match(line)) if items else bool(line.strip())
        if is_fact and ((fact_id and fact_id in known.ids) or normalise(line) in known.lines):
            dropped = True
            continue
        kept.append((line, fact_id))
        facts_left += is_fact
    if not dropped:
        return block
    if not facts_left:
        return None
    kept_ids: tuple[str, ...] = tuple(i for _, i in kept) if block.fact_ids else ()
    return attrs.evolve(block, text="\n".join(line for line, _ in kept), fact_ids=kept_ids)


def _order(block: SystemBlock) -> tuple[str, int, str]:
    return (block.slot, block.priority, block.source)


class SessionBlocks:
    """The kept ``session_init`` / ``hybrid`` blocks of the most recent ``max_sessions``
    sessions (at most ``max_blocks`` each; past that, a session's new blocks are used
    as they come). Thread-safe."""

    def __init__(self, max_sessions: int = 1024, max_blocks: int = 32) -> None:
        self.max_sessions = max_sessions
        self.max_blocks = max_blocks
        self._sessions: OrderedDict[_SessionKey, dict[_BlockKey, SystemBlock]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(attribution: Attribution) -> _SessionKey:
        return (attribution.entity_id, attribution.process_id, attribution.session_id)

    def sources(self, attribution: Attribution) -> frozenset[str]:
        """The sources whose block this session already keeps."""
        with self._lock:
            kept = self._sessions.get(self._key(attribution))
            return frozenset(source for source, _, _ in kept) if kept else frozenset()

    def apply(self, attribution: Attribution, plan: InjectionPlan) -> InjectionPlan:
        """``plan`` with the session's kept blocks (the first of each ``source`` + ``slot``,
        kept now if new) instead of fresh ``session_init`` ones, the fresh part of ``hybrid``
        blocks as ``per_turn`` blocks, and no per-turn block repeating a kept fact.

        Several blocks of one ``source`` + ``slot`` in a turn (injectors that leave
        ``source`` empty) are kept apart by their order: the n-th keeps the n-th kept one."""
        blocks = plan.system_blocks
        stable_asked = any(b.cache != "per_turn" for b in blocks)
        key = self._key(attribution)
        with self._lock:
            kept = self._sessions.get(key)
            if kept is None and not stable_asked:
                return plan
            if kept is None:
                kept = self._sessions[key] = {}
                while len(self._sessions) > self.max_sessions:
                    self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(key)
            overflow: list[SystemBlock] = []
            seen: dict[tuple[str, str], int] = {}
            for block in blocks:
                if block.cache == "per_turn":
                    continue
                n = seen[(block.source, block.slot)] = seen.get((block.source, block.slot), -1) + 1
                if (block.source, block.slot, n) in kept:
                    continue
                stable = attrs.evolve(block, cache="session_init")
                if len(kept) < self.max_blocks:
                    kept[(block.source, block.slot, n)] = stable
                elif block.cache == "session_init":
                    overflow.append(stable)
            session = sorted([*kept.values(), *overflow], key=_order)
        fresh = [
            b if b.cache == "per_turn" else attrs.evolve(b, cache="per_turn")
            for b in blocks
            if b.cache != "session_init"
        ]
        known = Known.of(session)
        per_turn = [b for b in (without_known(b, known) for b in fresh) if b is not None]
        return attrs.evolve(plan, system_blocks=[*session, *per_turn])

    def drop(self, *, entity_id: str) -> None:
        """Forget the kept blocks of every session of ``entity_id`` (its data was deleted)."""
        with self._lock:
            for key in [k for k in self._sessions if k[0] == entity_id]:
                del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)
