"""Recall latency as an entity's facts grow: 1k, 10k, 100k facts of one entity, and 1M facts
spread over 1,000 entities (1,000 each; the LRU keeps 256 entity indexes).

Facts are synthetic sentences over a 5,000-word vocabulary with random unit vectors (384-d,
as MiniLM's); the store hands them to memtap's index the way ``indexable_facts`` would
(generated on load instead of read from a database, so the figures are recall's, not a
database's). Queries are embedded for real with MiniLM when it is installed. Among the
facts, spread evenly, one per question asked holds that question's words (an answer in
its own words, as a real memory has): recall then takes the quick path, which is what is
measured. A question in other words than the facts goes to the full model
(``--embedder minilm-full`` measures that path for every query).

Reported per size: p50/p95 of ``Memory.recall`` (k=10) including the query embedding, and
of the index search alone (BM25 + exact vector scan + fusion), and the index load time.

    python benchmarks/recall_scaling.py [--sizes 1000,10000,100000] [--many 1000x1000]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import memtap
from memtap.longterm.index import EntityIndex
from memtap.protocol.model import Fact
from memtap.storage.store import InMemoryStore

DIM = 384
T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)
QUERIES = [
    "what did I say about my dog last week",
    "where do I work now",
    "which city did we visit in the summer",
    "what is my sister's favourite food",
    "when is the concert we talked about",
    "what book am I reading",
]


#: Words of the benchmark questions, so that the facts use them (recall_overhead.py's too).
QUESTION_WORDS = [
    "say",
    "dog",
    "last",
    "week",
    "work",
    "now",
    "city",
    "visit",
    "summer",
    "sister",
    "favourite",
    "food",
    "concert",
    "talked",
    "book",
    "reading",
    "tell",
    "days",
    "like",
]


def vocabulary(n: int = 5000) -> list[str]:
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = {"".join(rng.choice(letters, size=rng.integers(3, 9))) for _ in range(n * 2)}
    return [*sorted(words)[:n], *QUESTION_WORDS]


_WORDS = vocabulary()


def question(r: int, *, cold: bool = False) -> str:
    """Benchmark question ``r``: unique (no query-cache hits), and in words the facts use
    (so recall takes the quick path; a word no fact uses sends it to the full model)."""
    extra = _WORDS[(r * 7919 + (1 if cold else 0)) % 5000]
    return f"{QUERIES[r % len(QUERIES)]} {extra}"


class SyntheticStore(InMemoryStore):
    """Facts generated per entity on load: ``sizes[entity]`` facts, deterministic. Each of
    ``answers`` (the questions the benchmark asks) is planted in an entity's facts, spread
    evenly: a fact of 12 words that starts with the question's words."""

    def __init__(self, sizes: dict[str, int], model: str, answers: Sequence[str] = ()) -> None:
        super().__init__()
        self.sizes = sizes
        self.model = model
        self.words = _WORDS
        self.answers = list(answers)

    def indexable_facts(self, *, entity_id: str, model: str | None = None) -> list[tuple[Fact, Any]]:
        n = self.sizes.get(entity_id, 0)
        rng = np.random.default_rng(abs(hash(entity_id)) % 2**32)
        idx = rng.integers(0, len(self.words), size=(n, 12))
        vecs = rng.normal(size=(n, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        words = self.words
        every = max(1, n // len(self.answers)) if self.answers else 0
        rows = []
        for i in range(n):
            text = " ".join(words[j] for j in idx[i])
            if every and i % every == 0 and i // every < len(self.answers):
                said = self.answers[i // every].split()
                text = " ".join(said + text.split()[len(said) :])
            fact = Fact(
                entity_id=entity_id,
                text=text,
                created_at=T0 + _dt.timedelta(seconds=i),
                id=f"{entity_id}-{i}",
            )
            rows.append((fact, vecs[i] if model == self.model else None))
        return rows


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    s = sorted(samples)
    return s[len(s) // 2] * 1e3, s[int(len(s) * 0.95)] * 1e3


def one_entity(size: int, embedder: Any, rounds: int) -> dict[str, Any]:
    name = embedder.name if embedder is not None else "none"
    store = SyntheticStore({"big": size}, name, [question(r) for r in range(rounds)])
    mem = memtap.Memory(
        store, entry_points=False, embedder=embedder if embedder is not None else False, spool=False
    )
    t0 = time.perf_counter()
    mem.recall("warm", entity_id="big")
    load = time.perf_counter() - t0
    full: list[float] = []
    for r in range(rounds):
        q = question(r)
        t = time.perf_counter()
        mem.recall(q, entity_id="big", k=10)
        full.append(time.perf_counter() - t)
    escalated = mem.longterm.engine.stats.escalations
    entry = mem.longterm.engine.indexes.get("big", wait=True)
    assert entry is not None and entry.index is not None
    index: EntityIndex = entry.index
    rng = np.random.default_rng(1)
    search: list[float] = []
    for r in range(rounds):
        q = rng.normal(size=DIM).astype(np.float32)
        t = time.perf_counter()
        index.search(QUERIES[r % len(QUERIES)], q, k=10)
        search.append(time.perf_counter() - t)
    mem.close()
    return {
        "facts": size,
        "load_s": load,
        "escalated": escalated,
        "recall_ms": percentiles(full),
        "search_ms": percentiles(search),
    }


def many_entities(entities: int, per: int, embedder: Any, rounds: int) -> dict[str, Any]:
    name = embedder.name if embedder is not None else "none"
    asked = [question(r) for r in range(rounds)] + [question(r, cold=True) for r in range(min(rounds, 100))]
    store = SyntheticStore({f"e{i}": per for i in range(entities)}, name, asked)
    mem = memtap.Memory(
        store, entry_points=False, embedder=embedder if embedder is not None else False, spool=False
    )
    rng = np.random.default_rng(3)
    hot = [f"e{i}" for i in range(100)]
    for e in hot:
        mem.recall("warm", entity_id=e)
    warm: list[float] = []
    cold: list[float] = []
    for r in range(rounds):
        e = hot[int(rng.integers(0, len(hot)))]
        t = time.perf_counter()
        mem.recall(question(r), entity_id=e, k=10)
        warm.append(time.perf_counter() - t)
    for r in range(min(rounds, 100)):
        e = f"e{100 + r}"
        t = time.perf_counter()
        mem.recall(question(r, cold=True), entity_id=e, k=10)
        cold.append(time.perf_counter() - t)
    mem.close()
    return {
        "facts": entities * per,
        "entities": entities,
        "hot_recall_ms": percentiles(warm),
        "cold_recall_ms": percentiles(cold),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--many", default="1000x1000", help="ENTITIESxFACTS, or 'none'")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument(
        "--embedder", default="default", help="'off' for BM25 only, 'minilm-full' for full-model queries"
    )
    args = parser.parse_args()
    pm_mem = memtap.Memory(
        "memory://", embedder=False if args.embedder == "off" else args.embedder, spool=False
    )
    embedder = pm_mem.longterm.engine.embedder
    pm_mem.close()
    if embedder is not None and hasattr(embedder, "load"):
        embedder.load()
    quick = getattr(embedder, "prepare_quick_queries", None)
    if quick is not None and getattr(embedder, "quick_queries", False):
        quick()
    queries = "quick static table" if quick is not None and embedder.quick_queries else "full model"
    print(
        f"embedder: {embedder.name + ', queries: ' + queries if embedder is not None else 'none (BM25 only)'}"
    )
    print(
        f"{'facts':>8} {'load s':>7} {'recall p50':>11} {'p95':>7} {'search p50':>11} {'p95':>7} "
        f"{'full-model queries':>19}"
    )
    for size in (int(s) for s in args.sizes.split(",") if s):
        r = one_entity(size, embedder, args.rounds)
        print(
            f"{size:8d} {r['load_s']:7.2f} {r['recall_ms'][0]:11.2f} {r['recall_ms'][1]:7.2f} "
            f"{r['search_ms'][0]:11.2f} {r['search_ms'][1]:7.2f} {r['escalated']:>12d}/{args.rounds + 1}"
        )
    if args.many != "none":
        entities, per = (int(x) for x in args.many.split("x"))
        m = many_entities(entities, per, embedder, args.rounds)
        print(
            f"{m['facts']} facts over {m['entities']} entities: "
            f"hot entity recall p50 {m['hot_recall_ms'][0]:.2f} ms, "
            f"p95 {m['hot_recall_ms'][1]:.2f} ms; cold entity (load {per} facts + recall) p50 "
            f"{m['cold_recall_ms'][0]:.2f} ms, p95 {m['cold_recall_ms'][1]:.2f} ms"
        )


if __name__ == "__main__":
    main()
