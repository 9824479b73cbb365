"""Capture throughput and read latency of the storage backends, side by side.

    python benchmarks/storage.py [--exchanges 20000] [--postgres postgresql://...]

For each backend (a temporary DuckDB file; PostgreSQL when ``--postgres`` or
``$MEMTAP_TEST_POSTGRES_URL`` names a server, in a throwaway schema):

- capture throughput: exchanges/s through memtap's capture writer (batched background
  writes, what a registered client's calls go through), from the first submit to the flush;
- history latency: median ms of ``store.history(session, entity_id=..., limit=20)``;
- recall latency: median ms of ``Memory.recall(query, entity_id=..., k=5)`` over 1,000
  facts of one entity.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import memtap
from memtap.capture.writer import CapturedCall
from memtap.testing.storage_suite import make_exchange, make_fact

WORDS = [
    "alice",
    "bob",
    "tokyo",
    "paris",
    "beagle",
    "coffee",
    "tea",
    "guitar",
    "python",
    "rust",
    "flight",
    "hotel",
    "doctor",
]


def _median_ms(fn, n: int = 200) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def bench(url: str, exchanges: int) -> dict[str, float]:
    mem = memtap.Memory(url, spool=False)
    items = [make_exchange(i, entity_id=f"e{i % 50}", session_id=f"s{i % 500}") for i in range(exchanges)]
    started = time.perf_counter()
    for ex in items:
        mem.writer.submit(CapturedCall(lambda ex=ex: ex))
    assert mem.flush(600)
    throughput = exchanges / (time.perf_counter() - started)
    history = _median_ms(lambda: mem.store.history("s7", entity_id="e7", limit=20))
    facts = [
        make_fact(i, entity_id="recall", text=f"{WORDS[i % 13]} {WORDS[(i * 7) % 13]} note {i}")
        for i in range(1000)
    ]
    mem.store.add_facts(facts)
    recall = _median_ms(lambda: mem.recall("where does alice drink coffee", entity_id="recall", k=5))
    mem.close()
    return {"throughput": throughput, "history_ms": history, "recall_ms": recall}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--exchanges", type=int, default=20000)
    parser.add_argument("--postgres", default=os.environ.get("MEMTAP_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    backends = {"duckdb": f"duckdb:///{Path(tmp.name) / 'bench.duckdb'}"}
    schema = None
    if args.postgres:
        schema = f"memtap_bench_{uuid.uuid4().hex[:10]}"
        backends["postgres"] = f"{args.postgres}{'&' if '?' in args.postgres else '?'}schema={schema}"
    print(f"{args.exchanges} exchanges; 1,000 facts for recall")
    print(f"{'backend':10} {'capture exch/s':>15} {'history ms':>11} {'recall ms':>10}")
    try:
        for name, url in backends.items():
            r = bench(url, args.exchanges)
            print(f"{name:10} {r['throughput']:15.0f} {r['history_ms']:11.3f} {r['recall_ms']:10.3f}")
    finally:
        if schema:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
