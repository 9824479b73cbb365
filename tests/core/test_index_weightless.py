"""A word nearly every fact of an entity uses weighs nothing in a search (issue 37): its
postings are every fact, so scanning them made a search's cost grow with the entity (a
log of purchases: "note", "bought", "euros" in each) while it moved no score by a
hundredth."""

from __future__ import annotations

import datetime as _dt

import numpy as np

from memtap.longterm.index import EntityIndex
from memtap.protocol.model import Fact

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)
THINGS = ["bike", "kettle", "garden", "violin", "novel", "camera", "tent", "laptop", "sofa", "piano"]
PLACES = ["Lisbon", "Osaka", "Quito", "Accra", "Bergen", "Hobart", "Tartu", "Cusco", "Lyon", "Pune"]


def purchases(n: int) -> EntityIndex:
    index = EntityIndex()
    facts = [
        Fact(
            entity_id="alice",
            text=f"Note: I bought a {THINGS[i % 10]} in {PLACES[(i // 10) % 10]} for {i % 97 + 3} euros",
            created_at=T0 + _dt.timedelta(minutes=i),
            id=f"f{i}",
        )
        for i in range(n)
    ]
    index.add(facts)
    rng = np.random.default_rng(7)
    index.set_vectors({f.id: rng.standard_normal(8).astype(np.float32) for f in facts}, "test")
    return index


def test_a_word_every_fact_uses_scores_nothing():
    index = purchases(400)
    assert index.SMALL_UP_TO < 400
    assert not np.asarray(index.bm25("note bought euros")).any()
    assert np.asarray(index.bm25("kettle")).any()


def test_leaving_it_out_ranks_as_before():
    index = purchases(400)
    q = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    with_common = index.search("note bought kettle in osaka", q, k=10)
    without = index.search("kettle in osaka", q, k=10)
    assert [f.id for f, _ in with_common] == [f.id for f, _ in without]
