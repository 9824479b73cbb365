"""PostgreSQL at scale: write throughput with 4 processes writing at once, and vector search
latency with many facts over 10k entities, on the server (pgvector HNSW) and in process.

    python benchmarks/pg_scale.py [--facts 1000000] [--entities 10000] [--writers 4]
                                  [--dim 384] [--big-share 0.05] [--write-seconds 420]
                                  [--postgres postgresql://...]

Without ``--postgres`` it starts a throwaway PostgreSQL 18 with pgvector
(``memtap_postgres.testing.server``; needs ``memtap-postgres[testing]``). The store is a
fresh schema, dropped at the end.

1. Writes: ``--writers`` processes each open a :class:`PostgresStore` and write batches of
   500 facts (what memtap's background writer sends) with their vectors (``set_embeddings``:
   ``REAL[]`` and the pgvector column, HNSW-indexed), until ``--facts`` are written or
   ``--write-seconds`` have passed (then the scale reached is reported: on a small machine
   1M facts take far longer than a benchmark should). Facts go to ``--entities`` entities,
   one of which (``big``) takes ``--big-share`` of them. Vectors are random unit vectors
   (the search cost does not depend on what they mean). Meanwhile the parent samples the
   server-side search latency on the big entity.
2. Search, after the writes: for a typical entity and for ``big``: the server-side search
   (``store.nearest_facts``, k=10) p50/p95; in process, what memtap's recall index does: load
   the entity's facts and vectors once (``indexable_facts``: the cold cost, paid again at
   each refresh) and score them with NumPy (``X @ q``, top 10: the warm cost); and the
   server-side search's recall@10 against the exact answer.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

BATCH = 500
K = 10


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _entity(rng: random.Random, entities: int, big_share: float) -> str:
    return "big" if rng.random() < big_share else f"e{rng.randrange(entities)}"


def writer(
    url: str, n: int, facts: int, writers: int, args: dict[str, Any], deadline: float, out: Any
) -> None:
    """One writing process: its share of the facts, in batches, until done or ``deadline``."""
    from memtap.protocol.model import Fact
    from memtap_postgres import PostgresStore

    os.nice(5)
    store = PostgresStore(url)
    rng = random.Random(n)
    nrng = np.random.default_rng(n)
    written = 0
    share = facts // writers
    started = time.time()
    batch_times: list[float] = []
    try:
        while written < share and time.time() < deadline:
            size = min(BATCH, share - written)
            batch = [
                Fact(
                    entity_id=_entity(rng, args["entities"], args["big_share"]),
                    text=f"fact {n}-{written + i} " + " ".join(rng.sample(WORDS, 4)),
                )
                for i in range(size)
            ]
            vectors = _unit(nrng, size, args["dim"])
            t = time.perf_counter()
            store.add_facts(batch)
            store.set_embeddings({f.id: v.tolist() for f, v in zip(batch, vectors)}, model="bench")
            batch_times.append(time.perf_counter() - t)
            written += size
    finally:
        store.close()
    out.put((n, written, time.time() - started, batch_times))


WORDS = ["alice", "bob", "tokyo", "paris", "beagle", "coffee", "tea", "guitar", "python", "rust", "flight"]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _timed(fn: Callable[[], Any], n: int) -> list[float]:
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def search_figures(store: Any, entity: str, dim: int, queries: int) -> dict[str, float]:
    """Server-side and in-process search on one entity."""
    qrng = np.random.default_rng(12345)
    qs = _unit(qrng, queries, dim)
    t = time.perf_counter()
    rows = store.indexable_facts(entity_id=entity, model="bench")
    load_ms = (time.perf_counter() - t) * 1e3
    ids = [f.id for f, v in rows if v is not None]
    matrix = np.asarray([v for _, v in rows if v is not None], dtype=np.float32)
    it = iter(range(10**9))

    def in_process() -> list[str]:
        q = qs[next(it) % queries]
        scores = matrix @ q
        top = np.argpartition(-scores, min(K, len(ids) - 1))[:K]
        return [ids[i] for i in top[np.argsort(-scores[top])]]

    warm = _timed(in_process, queries)
    jt = iter(range(10**9))

    def server() -> None:
        store.nearest_facts(entity_id=entity, vector=qs[next(jt) % queries].tolist(), k=K, model="bench")

    served = _timed(server, queries)
    hits = possible = 0
    for q in qs[: min(queries, 50)]:
        exact = {ids[i] for i in np.argsort(-(matrix @ q))[:K]}
        near = store.nearest_facts(entity_id=entity, vector=q.tolist(), k=K, model="bench")
        found = {f.id for f, _ in near}
        hits += len(exact & found)
        possible += len(exact)  # an entity with fewer than K facts has fewer to find
    return {
        "facts": float(len(ids)),
        "server_p50_ms": statistics.median(served),
        "server_p95_ms": _pct(served, 0.95),
        "load_ms": load_ms,
        "in_process_p50_ms": statistics.median(warm),
        "recall_at_10": hits / max(possible, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--big-share", type=float, default=0.05)
    parser.add_argument("--write-seconds", type=float, default=420.0)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--postgres", default=None)
    args = parser.parse_args()

    from memtap_postgres import PostgresStore

    server = None
    base = args.postgres
    if base is None:
        from memtap_postgres.testing.server import ThrowawayServer

        server = ThrowawayServer()
        base = server.start()
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    store = PostgresStore(url)  # migrates once, before the writers start
    print(f"server {base} schema {schema} pgvector={store.pgvector}", flush=True)
    try:
        # One batch first, so that the HNSW index exists before the writers race to make it.
        from memtap.protocol.model import Fact

        seed = [Fact(entity_id="big", text="seed") for _ in range(K)]
        store.add_facts(seed)
        vectors = _unit(np.random.default_rng(0), K, args.dim)
        store.set_embeddings({f.id: v.tolist() for f, v in zip(seed, vectors)}, model="bench")
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        deadline = time.time() + args.write_seconds
        shared = {"entities": args.entities, "big_share": args.big_share, "dim": args.dim}
        procs = [
            ctx.Process(target=writer, args=(url, n, args.facts, args.writers, shared, deadline, out))
            for n in range(args.writers)
        ]
        started = time.time()
        for p in procs:
            p.start()
        during: list[float] = []
        qrng = np.random.default_rng(7)
        results = []
        while len(results) < len(procs):
            try:
                results.append(out.get(timeout=1.0))
            except Exception:
                q = _unit(qrng, 1, args.dim)[0].tolist()
                t = time.perf_counter()
                store.nearest_facts(entity_id="big", vector=q, k=K, model="bench")
                during.append((time.perf_counter() - t) * 1e3)
        for p in procs:
            p.join()
        elapsed = time.time() - started
        written = sum(r[1] for r in results)
        batches = [b for r in results for b in r[3]]
        budget = ""
        if written < args.facts - args.writers:
            share = f"{written / args.facts:.1%} of {args.facts:,}"
            budget = f"  (stopped at the {args.write_seconds:.0f} s budget: {share})"
        print(
            f"\nwrites: {written:,} facts with {args.dim}-d vectors by {args.writers} processes in"
            f" {elapsed:.1f} s = {written / elapsed:,.0f} facts/s; batch of {BATCH}"
            f" p50 {statistics.median(batches) * 1e3:.0f} ms, p95 {_pct(batches, 0.95) * 1e3:.0f} ms{budget}"
        )
        if during:
            print(f"server-side search on 'big' while writing: p50 {statistics.median(during):.1f} ms,"
                  f" p95 {_pct(during, 0.95):.1f} ms ({len(during)} samples)")  # fmt: skip
        sizes = store._read(
            "sizes",
            "SELECT pg_total_relation_size('facts'), pg_total_relation_size('fact_embeddings'),"
            " coalesce((SELECT pg_relation_size(c.oid) FROM pg_class c WHERE c.relname = %s"
            " AND c.relnamespace = to_regnamespace(current_schema())), 0)",
            [f"fact_embeddings_vec_hnsw_{args.dim}"],
        )[0]
        print(f"sizes: facts {sizes[0] / 2**20:,.0f} MiB, fact_embeddings {sizes[1] / 2**20:,.0f} MiB"
              f" (HNSW index {sizes[2] / 2**20:,.0f} MiB)")  # fmt: skip
        typical = store._read(
            "typical entity",
            "SELECT entity_id FROM facts WHERE entity_id <> 'big' GROUP BY 1"
            " ORDER BY abs(count(*) - (SELECT count(*) FROM facts WHERE entity_id <> 'big')"
            " / %s) LIMIT 1",
            [args.entities],
        )[0][0]
        print(f"\n{'entity':>10} {'facts':>8} {'server p50':>11} {'server p95':>11} {'recall@10':>10}"
              f" {'load (cold)':>12} {'in-process p50':>15}")  # fmt: skip
        for entity in (typical, "big"):
            r = search_figures(store, entity, args.dim, args.queries)
            print(
                f"{entity:>10} {r['facts']:>8,.0f} {r['server_p50_ms']:>8.2f} ms"
                f" {r['server_p95_ms']:>8.2f} ms"
                f" {r['recall_at_10']:>10.2f} {r['load_ms']:>9.0f} ms {r['in_process_p50_ms']:>12.3f} ms"
            )
        probe = _unit(np.random.default_rng(3), 1, args.dim)[0].tolist()
        for entity in ("big", typical):
            sql, params = store._nearest_query(entity_id=entity, vector=probe, k=K, model="bench")
            plan = store._read("plan", "EXPLAIN " + sql, params)
            nodes = [r[0].strip() for r in plan if "Scan" in r[0] or "Sort" in r[0] or "Limit" in r[0]]
            print(f"plan ({entity}):", " / ".join(n.split("  (")[0].split(": ")[0] for n in nodes))
    finally:
        import psycopg

        store.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
