"""Long-term memory behind :class:`memtap.Memory`'s fact methods: remember, recall, the
memorize worker and the ``remember`` agent tool, wired together (the recall injector over
its engine is one of core's defaults: :func:`memtap.memory.memory_plugins`)."""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Mapping
from typing import Any

from memtap.capture.quarantine import Quarantine
from memtap.errors import RecordRefusedError
from memtap.longterm.index import HIDDEN_KINDS
from memtap.longterm.memorize import LLM, AsyncLLM, Memorizer, store_facts
from memtap.longterm.recall import RecallEngine
from memtap.longterm.remember_tool import MemoryToolError, ToolFormat, memory_tool, parse_tool_args
from memtap.longterm.text import normalise
from memtap.protocol.embedder import Embedder
from memtap.protocol.model import Exchange, Fact, ScoredFact
from memtap.redact import redact_fact, redact_text
from memtap.storage.store import Store

log = logging.getLogger("memtap.memory")


class LongTermMemory:
    """Facts of entities: stored, indexed, recalled, injected, learned."""

    def __init__(
        self,
        store: Store,
        *,
        embedder: Embedder | None,
        llm: LLM | AsyncLLM | None,
        episodes: bool,
        quarantine: Quarantine | None = None,
    ) -> None:
        self.store = store
        self.quarantine = quarantine
        self.engine = RecallEngine(store, embedder)
        self.memorizer = Memorizer(store, self.engine, llm, episodes=episodes, quarantine=quarantine)

    def warm_up(self) -> None:
        """Start loading the embedder's model in the background (calls are coming)."""
        self.engine.warm_up()

    def memorize(self, exchanges: list[Exchange], then: Callable[[], None] | None = None) -> bool:
        """The capture writer stored ``exchanges``: memorize them in the background, then
        call ``then``; returns whether ``then`` will be called (:meth:`Memorizer.submit`)."""
        return self.memorizer.submit(exchanges, then)

    def remember(self, fact: Fact) -> Fact:
        """Store one fact, redacted, and index it (its vector follows in the background);
        returns the fact as stored. Raises :class:`memtap.errors.RecordRefusedError` when
        the store refuses it for what it holds (it is then kept in the quarantine)."""
        fact = redact_fact(fact)
        if not store_facts(self.store, [fact], self.quarantine):
            raise RecordRefusedError(
                f"the store refused fact {fact.id}; it is kept in quarantine (`memtap stats` counts it)"
            )
        self.engine.added([fact])
        return fact

    def recall(
        self,
        query: str,
        *,
        entity_id: str,
        process_id: str | None,
        k: int,
        min_score: float,
        deadline: float | None = None,
        now: _dt.datetime | None = None,
    ) -> list[ScoredFact]:
        """Hybrid recall; without ``deadline`` everything needed is waited for, with one
        (seconds) a cold entity gives ``[]`` (loaded in the background) and a late query
        vector falls back to words only. ``now`` is when the question is asked (what
        "yesterday" in it means)."""
        if k <= 0 or not query.strip():
            return []
        found = self.engine.search(
            query,
            entity_id=entity_id,
            process_id=process_id,
            k=k,
            min_score=min_score,
            deadline=deadline,
            now=now,
        )
        return found or []

    def recall_soon(
        self, query: str, *, entity_id: str, k: int, index_wait: float, deadline: float
    ) -> list[ScoredFact] | None:
        """Recall for a person waiting (a UI page, an MCP tool): by words as soon as the
        entity's index is loaded, waiting at most ``index_wait`` seconds for it and at most
        ``deadline`` for the question's vector; never for the facts' vectors (an entity
        imported a moment ago has none, and embedding 20,000 facts takes minutes).
        ``None``: the index is still loading (ask again in a moment)."""
        if not self.engine.indexes.wait_loaded(entity_id, index_wait):
            return None
        return self.recall(query, entity_id=entity_id, process_id=None, k=k, min_score=0.0, deadline=deadline)

    def load_soon(self, entity_id: str) -> None:
        """Start loading the entity's index in the background, if it is not loaded (a
        recall about it is coming: :meth:`recall_soon` then need not answer "loading")."""
        self.engine.indexes.get(entity_id, wait=False)

    def facts(self, *, entity_id: str, process_id: str | None = None) -> list[Fact]:
        """Current facts, newest first (tombstones of deleted facts left out)."""
        return [
            f
            for f in self.store.facts(entity_id=entity_id, process_id=process_id)
            if f.kind not in HIDDEN_KINDS
        ]

    def tool(self, fmt: ToolFormat) -> dict[str, Any]:
        """The ``remember`` tool definition."""
        return memory_tool(fmt)

    def handle_tool(self, args: Mapping[str, Any] | str, *, entity_id: str, process_id: str | None) -> Fact:
        """Validate a ``remember`` tool call and store its fact (superseding the fact it
        ``replaces``, when that text is a current fact; an already known text is not
        stored twice)."""
        parsed = parse_tool_args(args)
        text = redact_text(parsed.fact)
        current = {normalise(f.text): f for f in self.facts(entity_id=entity_id)}
        same = current.get(normalise(text))
        if same is not None:
            return same
        old = current.get(normalise(redact_text(parsed.replaces))) if parsed.replaces else None
        if parsed.replaces and old is None:
            log.info("memtap remember tool: %r replaces no current fact; storing it as new", text)
        fact = Fact(
            entity_id=entity_id,
            process_id=process_id,
            text=text,
            supersedes=old.id if old is not None else None,
            metadata={"source": "memory_tool"},
        )
        return self.remember(fact)

    def forget(self, entity_id: str) -> None:
        """Drop the entity's cached index (the store deletes the facts)."""
        self.engine.forget(entity_id)

    def flush(self, timeout: float | None) -> bool:
        """Wait for memorize (facts stored). Embedding is not waited for: vectors are
        derived data, made again when missing, and :meth:`recall` embeds what it lacks."""
        return self.memorizer.flush(timeout)

    def wait_backlog(self, most: int, timeout: float | None) -> bool:
        """Wait until memorize has at most ``most`` exchanges left to process."""
        return self.memorizer.wait_backlog(most, timeout)

    def close(self, timeout: float | None) -> None:
        """Finish background work and stop its threads."""
        self.memorizer.close(timeout)
        self.engine.close(timeout)


__all__ = ["LongTermMemory", "MemoryToolError"]
