"""One fact, one place in the recall index: a fact that reaches the index more than once
(identical episodes of repeated requests, a batch that names a fact twice, a refresh that
re-reads what was added) is indexed once and recalled once."""

from __future__ import annotations

import datetime as _dt

import memtap
from memtap.longterm.index import EntityIndex
from memtap.protocol.model import Fact, Message
from memtap.storage.store import InMemoryStore

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)


def fact(text: str, fact_id: str | None = None) -> Fact:
    kw = {"id": fact_id} if fact_id else {}
    return Fact(entity_id="alice", text=text, created_at=T0, **kw)


def test_a_batch_naming_a_fact_twice_indexes_it_once():
    index = EntityIndex()
    same = fact("I live in Tokyo", "f1")
    index.add([same, same, fact("I drink tea", "f2"), same])
    assert len(index) == 2
    assert len(index.facts) == 2
    hits = index.search({"tokyo": 1}, None, k=10)
    assert [f.id for f, _ in hits] == ["f1"]


def test_a_fact_added_again_later_is_not_indexed_again():
    index = EntityIndex()
    index.add([fact("I live in Tokyo", "f1")])
    index.add([fact("I live in Tokyo", "f1")])
    assert (len(index), len(index.facts)) == (1, 1)


def test_repeated_identical_turns_are_one_fact_recalled_once():
    """An agent sends the same prompt again and again (a benchmark, a retry loop, a cron
    job): the episode is stored once and recall finds it once, not once per request."""
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=None)
    try:
        for i in range(40):
            mem.capture(
                [Message(role="user", content="Read notes.txt and tell me what it says.")],
                [Message(role="assistant", content="It lists the deploy key rotation.")],
                entity_id="alice",
                session_id=f"s{i % 3}",
            )
            if i % 7 == 0:
                assert mem.flush()  # several writer batches, not one
        assert mem.flush()
        texts = [f.text for f in mem.facts(entity_id="alice")]
        assert texts.count("Read notes.txt and tell me what it says.") == 1
        hits = mem.recall("what does notes.txt say", entity_id="alice", k=10)
        assert len({h.fact.id for h in hits}) == len(hits)
        assert [h.fact.text for h in hits].count("Read notes.txt and tell me what it says.") == 1
    finally:
        mem.close()
