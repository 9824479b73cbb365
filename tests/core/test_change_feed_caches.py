"""What a Memory does with a store's change feed (memtap.storage.changes): caches follow other
processes' writes without ever serving nothing meanwhile. Two Memory objects share one
in-memory store through handles that report each other's writes, as PostgreSQL's feed
does (tests/plugins/postgres/test_change_feed.py runs the real thing across processes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import memtap
from memtap.history.injector import SessionHistories
from memtap.protocol.model import Attribution, Exchange, Fact, Message, utcnow
from memtap.storage.changes import EVERYTHING, ChangeCallback, ChangeWatchers, StoreChange
from memtap.storage.store import InMemoryStore
from memtap.testing.timing import eventually, slack


class Handle:
    """One process's store object on shared data: its writes are reported to the other
    handles' watchers (never its own), like a change feed."""

    def __init__(self, data: InMemoryStore, handles: list[Handle]) -> None:
        self.data = data
        self.url = data.url
        self.handles = handles
        self.watchers = ChangeWatchers()
        #: Set to make the next index loads wait (a slow reload).
        self.gate: threading.Event | None = None
        #: Set when a load reaches :attr:`gate`.
        self.held = threading.Event()
        self.read_by_id = 0
        handles.append(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.data, name)

    def watch_changes(self, fn: ChangeCallback) -> None:
        self.watchers.watch(fn)

    def _tell(self, changes: list[StoreChange]) -> None:
        for other in self.handles:
            if other is not self:
                other.watchers.changed(changes)

    def add_facts(self, facts: Sequence[Fact]) -> None:
        self.data.add_facts(facts)
        self._tell([StoreChange(entity_id=f.entity_id, facts=True, fact_ids=(f.id,)) for f in facts])

    def update_fact_context(self, facts: Sequence[Fact]) -> list[str]:
        updated = self.data.update_fact_context(facts)
        by_entity = {f.id: f.entity_id for f in facts}
        self._tell([StoreChange(entity_id=by_entity[i], facts=True, fact_ids=(i,)) for i in updated])
        return updated

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        self.data.write_exchanges(exchanges)
        self._tell(
            [
                StoreChange(entity_id=e.attribution.entity_id, session_id=e.attribution.session_id)
                for e in exchanges
            ]
        )

    def forget(self, *, entity_id: str) -> int:
        n = self.data.forget(entity_id=entity_id)
        self._tell([StoreChange(entity_id=entity_id, forgotten=True)])
        return n

    def indexable_facts_by_id(
        self, *, entity_id: str, ids: Sequence[str], model: str | None = None
    ) -> list[Any]:
        if not self.by_id:
            raise AttributeError("indexable_facts_by_id")  # as a store without it
        self.read_by_id += 1
        return [
            row for row in self.data.indexable_facts(entity_id=entity_id, model=model) if row[0].id in ids
        ]

    def indexable_facts(self, *, entity_id: str, model: str | None = None) -> list[Any]:
        rows = self.data.indexable_facts(entity_id=entity_id, model=model)
        if self.gate is not None:
            self.held.set()
            self.gate.wait(10)
        return rows


class HandleById(Handle):
    """A handle that also reads facts by id (``indexable_facts_by_id``): another process's
    facts are then taken into a cached index instead of reloading it."""

    def indexable_facts_by_id(
        self, *, entity_id: str, ids: Sequence[str], model: str | None = None
    ) -> list[Any]:
        self.read_by_id += 1
        return [
            row for row in self.data.indexable_facts(entity_id=entity_id, model=model) if row[0].id in ids
        ]


def pair(by_id: bool = False) -> tuple[memtap.Memory, memtap.Memory, Handle, Handle]:
    data = InMemoryStore()
    handles: list[Handle] = []
    kind = HandleById if by_id else Handle
    a, b = kind(data, handles), kind(data, handles)
    kw: dict[str, Any] = {"embedder": False, "spool": False, "entry_points": True}
    return memtap.Memory(a, **kw), memtap.Memory(b, **kw), a, b  # type: ignore[arg-type]


def texts(mem: memtap.Memory, query: str, entity: str) -> list[str] | None:
    found = mem.longterm.engine.search(query, entity_id=entity, deadline=0.05)
    return None if found is None else [s.fact.text for s in found]


def test_the_old_index_serves_while_another_process_fact_is_loaded() -> None:
    a, b, _, hb = pair()
    try:
        a.remember("Alice plays the cello", entity_id="alice")
        assert b.recall("what does alice play", entity_id="alice")[0].fact.text == "Alice plays the cello"
        hb.gate = threading.Event()  # b's reload now hangs until released
        a.remember("Alice plays the violin too", entity_id="alice")
        for _ in range(20):  # never cold, never empty while the reload waits
            assert texts(b, "what does alice play", "alice") == ["Alice plays the cello"]
            time.sleep(0.005)
        hb.gate.set()
        assert eventually(lambda: len(texts(b, "what does alice play", "alice") or []) == 2)
    finally:
        a.close()
        b.close()


def test_a_change_during_a_load_is_loaded_too() -> None:
    """A reload that read the store before a change is followed by another."""
    a, b, _, hb = pair()
    try:
        a.remember("Bob likes tea", entity_id="bob")
        b.recall("what does bob like", entity_id="bob")
        hb.gate = threading.Event()
        a.remember("Bob likes coffee", entity_id="bob")  # b starts reloading (held)
        assert hb.held.wait(slack(5))
        a.remember("Bob likes cocoa", entity_id="bob")  # while that load waits
        hb.gate.set()
        assert eventually(lambda: len(texts(b, "what does bob like", "bob") or []) == 3)
    finally:
        a.close()
        b.close()


def test_a_forget_elsewhere_empties_every_cache_at_once() -> None:
    a, b, _, _ = pair()
    try:
        a.remember("Carol's PIN is 1234", entity_id="carol")
        a.capture(
            [Message("user", "my PIN is 1234")],
            [Message("assistant", "ok")],
            entity_id="carol",
            session_id="s",
        )
        a.flush()
        assert b.recall("carol pin", entity_id="carol")
        at = Attribution(entity_id="carol", session_id="s")
        b.histories.get(at)
        assert eventually(lambda: bool(b.histories.get(at)))
        a.forget(entity_id="carol")
        assert texts(b, "carol pin", "carol") in (None, [])
        assert b.histories.get(at) == []
    finally:
        a.close()
        b.close()


def test_a_session_written_elsewhere_is_read_again_and_merged() -> None:
    a, b, _, _ = pair()
    try:
        at = Attribution(entity_id="dan", session_id="s")
        a.capture([Message("user", "one")], [Message("assistant", "1")], entity_id="dan", session_id="s")
        a.flush()
        b.histories.get(at)
        assert eventually(lambda: [m.content for m in b.histories.get(at)] == ["one", "1"])
        a.capture([Message("user", "two")], [Message("assistant", "2")], entity_id="dan", session_id="s")
        a.flush()
        assert eventually(lambda: [m.content for m in b.histories.get(at)] == ["one", "1", "two", "2"])
    finally:
        a.close()
        b.close()


def test_everything_changed_reloads_every_cache() -> None:
    a, b, ha, hb = pair()
    try:
        b.recall("anything", entity_id="erin")
        ha.data.add_facts([Fact(entity_id="erin", text="Erin is a chemist")])  # not reported
        time.sleep(0.05)
        assert texts(b, "erin chemist", "erin") == []
        hb.watchers.changed([EVERYTHING])  # the feed reconnected
        assert eventually(lambda: texts(b, "erin chemist", "erin") == ["Erin is a chemist"])
    finally:
        a.close()
        b.close()


def test_a_refreshed_full_session_keeps_its_order() -> None:
    """A read of a session that fills the cache's window drops the cached messages older
    than it instead of appending them after the new ones."""
    stored: list[Message] = []

    def load(attribution: Attribution, limit: int) -> list[Message]:
        return stored[-limit:]

    def msg(i: int) -> Message:
        return Message("user", f"m{i}", exchange_id=f"x{i}", created_at=utcnow())

    histories = SessionHistories(load, max_messages=3)
    at = Attribution(entity_id="f", session_id="s")
    stored.extend(msg(i) for i in range(3))
    histories.get(at)
    assert eventually(lambda: [m.content for m in histories.get(at)] == ["m0", "m1", "m2"])
    stored.append(msg(3))
    histories.refresh("f", "s")
    assert eventually(lambda: [m.content for m in histories.get(at)] == ["m1", "m2", "m3"])
    histories.close()


def test_facts_named_by_the_feed_are_taken_in_without_a_reload() -> None:
    """A store that reads facts by id: another process's new facts join the cached index
    (a superseded one leaves it), and the entity is not loaded again."""
    a, b, _, hb = pair(by_id=True)
    try:
        old = a.remember("Gina lives in Lyon", entity_id="gina")
        assert texts_now(b, "where does gina live", "gina") == ["Gina lives in Lyon"]
        loads = b.recall_stats().index_loads
        a.longterm.remember(Fact(entity_id="gina", text="Gina lives in Nantes", supersedes=old.id))
        assert eventually(lambda: texts(b, "where does gina live", "gina") == ["Gina lives in Nantes"])
        assert b.recall_stats().index_loads == loads
        assert hb.read_by_id == 1
    finally:
        a.close()
        b.close()


def texts_now(mem: memtap.Memory, query: str, entity: str) -> list[str]:
    return [s.fact.text for s in mem.recall(query, entity_id=entity)]


def test_a_context_completed_elsewhere_is_taken_into_the_cached_index() -> None:
    """Another process's next exchange completes an episode's context: the feed names the
    fact, this process reads it again by id and indexes its new context in place (a word
    only the following turn says finds it), without reloading the entity."""
    a, b, _, hb = pair(by_id=True)
    try:
        booked = "We finally booked the flights yesterday"
        a.capture(
            [Message("user", booked)], [Message("assistant", "Great!")], entity_id="hal", session_id="s"
        )
        assert eventually(lambda: texts_now(b, "booked flights", "hal") == [booked])
        assert texts_now(b, "lisbon", "hal") == []
        loads, reads = b.recall_stats().index_loads, hb.read_by_id
        a.capture(
            [Message("user", "Lisbon, in June")],
            [Message("assistant", "ok")],
            entity_id="hal",
            session_id="s",
        )
        assert eventually(lambda: booked in texts_now(b, "lisbon", "hal"))
        assert b.recall_stats().index_loads == loads
        assert hb.read_by_id > reads
    finally:
        a.close()
        b.close()
