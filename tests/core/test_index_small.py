"""A small index (up to ``EntityIndex.SMALL_UP_TO`` slots) is searched in plain Python;
it must rank and score exactly as the vectorised search does, in every case the vectorised
search handles: words only, vectors for some facts, removed and superseded facts,
process scopes, excluded ids, the time a question names, ``min_score`` and ``k``."""

from __future__ import annotations

import datetime as _dt
import random

import numpy as np
import pytest

from memtap.longterm.index import EntityIndex
from memtap.longterm.temporal import TimeWindow
from memtap.protocol.model import Fact

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)
WORDS = ["tokyo", "coffee", "beagle", "deploy", "key", "rotates", "friday", "notes", "release"]
WORDS += ["team", "kubernetes", "staging", "vegan", "peanuts"]


def random_vector(rng: random.Random):
    return np.asarray([rng.uniform(-1, 1) for _ in range(8)], np.float32)


def random_window(rng: random.Random) -> TimeWindow:
    start = T0 + _dt.timedelta(minutes=rng.randint(-2000, 10_000))
    end = start + _dt.timedelta(minutes=rng.randint(60, 5000))
    return TimeWindow(start=start, end=end, span=(0, 1), expression="then", relative=False)


def random_index(rng: random.Random, n: int) -> EntityIndex:
    index = EntityIndex()
    facts = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.3:  # a fact that names a time ("yesterday", a date)
            text += rng.choice([" yesterday", " last week", " on 3 January 2025", " in May 2024"])
        context = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))
        facts.append(
            Fact(
                entity_id="alice",
                text=text,
                process_id=rng.choice([None, "bot", "other"]),
                created_at=T0 + _dt.timedelta(minutes=rng.randint(0, 10_000)),
                metadata={"context": context} if context else {},
                id=f"f{i}",
            )
        )
    index.add(facts)
    vectors = {f.id: random_vector(rng) for f in facts if rng.random() < 0.7}
    if vectors:
        index.set_vectors(vectors, "test")
    index.remove(f.id for f in facts if rng.random() < 0.2)
    return index


def vectorised(index: EntityIndex, *args, **kw):
    """The same search with the small-index path turned off."""
    index.SMALL_UP_TO = -1
    try:
        return index.search(*args, **kw)
    finally:
        del index.SMALL_UP_TO


def assert_same(small, big):
    assert len(small) == len(big)
    for (_, s), (_, b) in zip(small, big):
        assert s == pytest.approx(b, abs=1e-5)
    # The same facts in the same order, ties (equal to float32 precision) aside.
    assert [round(s, 4) for _, s in small] == [round(b, 4) for _, b in big]
    assert {f.id for f, _ in small} == {f.id for f, _ in big} or _tied_at_the_cut(small, big)


def _tied_at_the_cut(small, big) -> bool:
    return bool(small) and small[-1][1] == pytest.approx(big[-1][1], abs=1e-5)


@pytest.mark.parametrize("seed", range(120))
def test_small_search_ranks_as_the_vectorised_search(seed):
    rng = random.Random(seed)
    index = random_index(rng, rng.randint(1, EntityIndex.SMALL_UP_TO))
    query = " ".join(rng.choice([*WORDS, "unknown", "words"]) for _ in range(rng.randint(1, 5)))
    qvec = random_vector(rng) if rng.random() < 0.7 else None
    kw = {
        "k": rng.choice([1, 3, 5, 50]),
        "process_id": rng.choice([None, "bot", "nobody"]),
        "min_score": rng.choice([0.0, 0.0, 0.3]),
        "exclude": [f"f{rng.randrange(48)}" for _ in range(rng.randint(0, 3))],
        "window": rng.choice([None, None, random_window(rng)]),
    }
    small = index.search(query, qvec, **kw)
    assert_same(small, vectorised(index, query, qvec, **kw))


def test_the_small_path_is_the_one_taken_for_a_handful_of_facts(monkeypatch):
    index = random_index(random.Random(1), 5)
    calls = []
    original = EntityIndex._search_small

    def spy(self, *args):
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(EntityIndex, "_search_small", spy)
    index.search("tokyo coffee", None)
    assert calls
    big = random_index(random.Random(2), EntityIndex.SMALL_UP_TO + 1)
    calls.clear()
    big.search("tokyo coffee", None)
    assert not calls
