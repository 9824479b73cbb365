"""BM25 over all of a question's postings at once gives, to the bit, what adding them term
by term in float32 gives (the loop it replaced, kept here as the reference): scores,
each fact's share of the question's weight, and the facts that matched, on entities of
every size, with removed facts, repeated and unknown words, and words every fact uses."""

from __future__ import annotations

import datetime as _dt
import random

import numpy as np
import pytest

from memtap.longterm.index import EntityIndex
from memtap.longterm.text import term_counts
from memtap.protocol.model import Fact

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)
WORDS = [
    "note",
    "bought",
    "kettle",
    "garden",
    "violin",
    "novel",
    "camera",
    "tent",
    "laptop",
    "sofa",
    "piano",
    "lisbon",
    "osaka",
    "quito",
    "accra",
    "bergen",
    "hobart",
    "tartu",
    "cusco",
    "lyon",
    "pune",
    "sister",
    "moved",
    "train",
    "tea",
    "coffee",
    "morning",
    "late",
    "allergic",
    "peanuts",
    "marathon",
]


def reference_lexical(index: EntityIndex, query: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The term-by-term loop: each term's postings added to the scores in float32."""
    n = len(index.facts)
    scores = np.zeros(n, np.float32)
    covered = np.zeros(n, np.float32)
    f = index.fusion
    avgdl = max(index.total_len / index.alive_count, 1e-6)
    base, per_len = f.k1 * (1 - f.b), f.k1 * f.b / avgdl
    mass = 0.0
    matched = []
    for term, qtf in term_counts(query).items():
        p = index.postings.get(term)
        if p is None:
            mass += index._idf(0) * qtf
            continue
        idf = index._idf(len(p.slots))
        mass += idf * qtf
        if idf < index.WEIGHTLESS_IDF:
            continue
        slots = np.frombuffer(p.slots, dtype=np.int32)
        tf = np.frombuffer(p.tf, dtype=np.float32)
        covered[slots] += idf * qtf
        norm = index._doclen[slots] * per_len
        norm += base
        norm += tf
        scores[slots] += (idf * qtf * (f.k1 + 1)) * tf / norm
        matched.append(slots)
    if mass:
        covered *= 1 / mass
    if index.alive_count < n:
        scores[~index._alive[:n]] = 0
    hit = np.unique(np.concatenate(matched)) if matched else np.zeros(0, np.intp)
    if index.alive_count < n:
        hit = hit[index._alive[hit]]
    return scores, covered, hit


def entity(n: int, seed: int, removed: int) -> EntityIndex:
    rng = random.Random(seed)
    index = EntityIndex()
    facts = [
        Fact(
            entity_id="e",
            text="note " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14))),
            created_at=T0 + _dt.timedelta(minutes=i),
            id=f"f{i}",
        )
        for i in range(n)
    ]
    index.add(facts)
    index.remove([f.id for f in rng.sample(facts, removed)])
    return index


@pytest.mark.parametrize(("n", "removed"), [(3, 0), (40, 5), (400, 0), (900, 120)])
def test_bm25_of_all_postings_at_once_equals_the_term_by_term_loop(n: int, removed: int) -> None:
    rng = random.Random(n)
    index = entity(n, seed=n, removed=removed)
    queries = ["note", "nothing known here", "kettle kettle kettle in osaka", "note bought tea"]
    queries += [" ".join(rng.choice([*WORDS, "zebra"]) for _ in range(rng.randint(1, 12))) for _ in range(40)]
    for query in queries:
        want_scores, want_covered, want_hit = reference_lexical(index, query)
        scores, hit, covered = index._lexical(query, matches=True)
        assert scores.tobytes() == want_scores.tobytes(), query
        assert covered.tobytes() == want_covered.tobytes(), query
        assert hit.tolist() == want_hit.tolist(), query
        assert index._lexical(query, matches=False)[1] is None
