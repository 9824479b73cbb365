"""The core of ``memtap explain``: the score parts recall computes for each hit add up to
its score on both search paths (a small index scored in Python, a larger one in numpy),
asking for them changes no result, and the record's JSON form round-trips."""

from __future__ import annotations

import datetime as _dt
import math
import random

import pytest

from memtap.longterm.index import EntityIndex
from memtap.longterm.temporal import query_window
from memtap.longterm.text import term_counts
from memtap.protocol.model import (
    Attribution,
    Exchange,
    Explanation,
    Fact,
    from_dict,
    injected_from_json,
    injected_to_json,
    to_dict,
)
from memtap.testing.storage_suite import injected_blocks

T0 = _dt.datetime(2025, 5, 1, tzinfo=_dt.timezone.utc)
WORDS = [
    "tokyo",
    "river",
    "beagle",
    "tea",
    "coffee",
    "museum",
    "garden",
    "piano",
    "bicycle",
    "train",
    "mountain",
]


def index_of(n: int, *, vectors: bool) -> EntityIndex:
    rng = random.Random(n)
    index = EntityIndex()
    facts = [
        Fact(
            entity_id="alice",
            text=" ".join(rng.sample(WORDS, 3)),
            created_at=T0 + _dt.timedelta(days=i % 40),
            id=f"f{i}",
        )
        for i in range(n)
    ]
    index.add(facts)
    if vectors:
        index.set_vectors({f.id: [rng.random(), rng.random(), rng.random()] for f in facts}, "toy")
    return index


@pytest.mark.parametrize("n", [20, 300])
@pytest.mark.parametrize("vectors", [False, True])
@pytest.mark.parametrize("when", [None, "in May 2025"])
@pytest.mark.parametrize("present", [False, True])
def test_parts_add_up_to_the_score_and_change_nothing(n, vectors, when, present):
    index = index_of(n, vectors=vectors)
    counts = term_counts("tokyo beagle tea")
    qvec = [0.5, 0.2, 0.9] if vectors else None
    window = query_window(when, T0 + _dt.timedelta(days=60)) if when else None
    plain = index.search(counts, qvec, k=8, window=window, present=present)
    raw: dict = {}
    hits = index.search(counts, qvec, k=8, window=window, parts=raw, present=present)
    parts = {fact_id: p.as_dict() for fact_id, p in raw.items()}
    assert [(f.id, s) for f, s in hits] == [(f.id, s) for f, s in plain]
    assert hits and set(parts) == {f.id for f, _ in hits}
    for fact, score in hits:
        p = parts[fact.id]
        total = sum(
            p.get(name, 0.0) for name in ("words", "vector", "role", "present", "time", "recency", "moved")
        )
        assert math.isclose(min(1.0, total), score, rel_tol=1e-5, abs_tol=1e-6)
        assert ("vector" in p) == vectors and ("cosine" in p) == vectors
        assert p["bm25"] >= 0


def test_the_record_round_trips_through_json_and_export():
    blocks = injected_blocks()
    assert injected_from_json(injected_to_json(blocks)) == blocks
    ex = Exchange(attribution=Attribution(entity_id="alice"), provider="p", operation="chat", injected=blocks)
    back = from_dict(to_dict(ex), Exchange)
    assert back == ex and back.injected == blocks
    assert back.injected[0].turns[0].exchange_id == "ex-0"
    plain = Exchange(attribution=Attribution(), provider="p", operation="chat")
    assert "injected" not in to_dict(plain)  # exports of calls without a record keep their shape
    data = Explanation(exchange=ex, blocks=blocks).to_dict()
    assert "injected" not in data["exchange"]
    assert [b["kind"] for b in data["blocks"]] == ["history", "recall", "rules"]
    assert data["blocks"][1]["left_out"][0] == {
        "fact_id": "f2",
        "text": "'); DROP TABLE facts; --",
        "score": 0.01,
        "parts": {"words": 0.01},
        "reason": "threshold",
    }


def test_forgetting_one_fact_retracts_it_and_nothing_else():
    """``Memory.forget(entity_id=, fact_id=)`` (the MCP ``forget`` tool with a fact id):
    the fact is no longer recalled or listed, the entity's other facts and other
    entities' facts stay; an unknown or another entity's fact id retracts nothing."""
    import memtap
    from memtap.storage.store import InMemoryStore

    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=None)
    try:
        tokyo = mem.remember("Alice lives in Tokyo", entity_id="alice")
        tea = mem.remember("Alice likes tea in Tokyo", entity_id="alice")
        bobs = mem.remember("Bob lives in Tokyo", entity_id="bob")
        assert len(mem.recall("tokyo", entity_id="alice")) == 2
        assert mem.forget(entity_id="alice", fact_id=bobs.id) == 0
        assert mem.forget(entity_id="alice", fact_id="no-such-fact") == 0
        assert mem.forget(entity_id="alice", fact_id=tokyo.id) == 1
        assert [h.fact.id for h in mem.recall("tokyo", entity_id="alice")] == [tea.id]
        assert [f.id for f in mem.facts(entity_id="alice")] == [tea.id]
        assert mem.forget(entity_id="alice", fact_id=tokyo.id) == 0  # already retracted
        assert [f.id for f in mem.facts(entity_id="bob")] == [bobs.id]
    finally:
        mem.close()


def test_a_history_injected_again_is_recorded_the_same_and_a_new_turn_anew():
    """The record's turns are remembered by message object (a session's history is injected
    call after call): the same objects give the same record; another object with the same
    time and another text (or a secret) is recorded as it is."""
    from memtap.capture.explanation import injected_blocks as record_of
    from memtap.protocol.model import Message
    from memtap.protocol.wire import InjectionPlan
    from memtap.redact import REDACTED
    from memtap.testing.secrets import SECRETS

    turns = [
        Message("user", "We deploy on Fridays.", created_at=T0),
        Message("assistant", "Noted.", created_at=T0),
    ]
    first = record_of(InjectionPlan(history=turns))
    again = record_of(InjectionPlan(history=list(turns)))
    assert first == again
    assert first[0].text == "user: We deploy on Fridays.\nassistant: Noted."
    assert all(t.created_at is None for t in first[0].turns)
    secret = SECRETS[0].text
    changed = [turns[0], Message("assistant", f"Your key is {secret}", created_at=T0)]
    record = record_of(InjectionPlan(history=changed))[0]
    assert record.text == f"user: We deploy on Fridays.\nassistant: Your key is {REDACTED}"
    assert secret not in repr(record)


def test_the_injected_column_is_the_records_json_whatever_was_encoded_before():
    """The SQL stores' ``injected`` column is written block by block, each turn encoded once
    per message object: the text is the record's JSON all the same, for a fresh turn, a
    turn seen before (in another block, another call) and blocks without turns, and it
    reads back as the record."""
    import json

    import attrs

    from memtap.memo import IdentityMemo
    from memtap.protocol.model import InjectedBlock, Message
    from memtap.storage.sqlrows import injected_json

    def plain(blocks):
        return json.dumps(injected_to_json(blocks), ensure_ascii=False, separators=(",", ":"))

    blocks = injected_blocks()
    history = blocks[0]
    later = InjectedBlock(
        kind="history",
        text="later",
        turns=(*history.turns[1:], Message("user", "new\u2028turn \x00 é", name="al", exchange_id="ex-1")),
    )
    cases = [blocks, (later,), (later, *blocks), (attrs.evolve(history, turns=()),), (blocks[2],)]
    for given in cases * 2:  # the second time every turn is known
        ex = Exchange(attribution=Attribution(entity_id="a"), provider="p", operation="chat", injected=given)
        text = injected_json(ex)
        assert text == plain(given)
        assert injected_from_json(json.loads(text)) == given
    assert injected_json(Exchange(attribution=Attribution(), provider="p", operation="chat")) is None

    memo: IdentityMemo[object, int] = IdentityMemo(2)
    made: list[object] = []
    first, second, third = object(), object(), object()
    for obj in (first, second, first, second):
        memo.get(obj, lambda o: made.append(o) or len(made))
    assert made == [first, second]  # made once each while remembered
    assert memo.get(third, lambda o: 99) == 99 and memo.get(first, lambda o: 7) == 7  # bounded: forgotten


def test_a_superseded_statement_is_marked_in_the_explain_table():
    from rich.console import Console

    from memtap.cli.explain import SUPERSEDED, _facts_table
    from memtap.protocol.model import ExplainedFact

    older = ExplainedFact(
        fact_id="f1", text="I'm a teacher", score=0.4, parts={"words": 0.4, "superseded": 1.0}
    )
    newer = ExplainedFact(
        fact_id="f2", text="I'm a surveyor now", score=0.4, parts={"words": 0.3, "moved": 0.1}
    )
    console = Console(width=200, record=True)
    console.print(_facts_table([newer, older], "injected facts", reasons=False))
    shown = console.export_text()
    assert (
        SUPERSEDED.strip() + " I'm a teacher" in shown and SUPERSEDED.strip() + " I'm a surveyor" not in shown
    )
    assert "moved" in shown
