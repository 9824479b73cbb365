"""Many ``remember`` calls back to back: is each fact findable by meaning as soon as it is
written, how fast do the full model's vectors follow, and does recall keep its deadline?

N facts (default 50,000) are remembered for a few entities, as a bulk import or a busy
agent's memory tool would, into a DuckDB file with the defaults (the installed embedder,
the spool), the entities' indexes loaded as in a running app. Every ``--probe`` calls: is
the fact just written in its entity's index *with a vector* at that instant (findable by
meaning, the quick vector at least), and a question in words no fact uses (so recall asks
the full model: the slow path) is timed against the request path's deadline
(``RecallBudget().deadline``). Printed per window: remember calls/s, the probe, and the
facts of the indexes with no vector at all, with only the quick one. At the end the full
model's vectors are waited for and their rate is set beside the embedder's own (texts/s
embedding alone, one thread, measured in the same run).

    python benchmarks/bulk_remember.py [--facts 50000] [--probe 1000] [--entities 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from soak import findable

import memtap
from memtap import RecallBudget

TOPICS = [
    "bicycle",
    "automobile",
    "physician",
    "apartment",
    "sofa",
    "holiday",
    "trousers",
    "lawyer",
    "film",
    "kitten",
]
CITIES = ["Lisbon", "Osaka", "Quito", "Accra", "Bergen", "Hobart", "Tartu", "Cusco", "Lyon", "Pune"]
#: A question in words no fact says: recall cannot answer it by words and asks the full model.
PROBE_QUESTION = "which conveyance did somebody mend?"


def fact_text(n: int) -> str:
    """The ``n``-th fact (each different: its tag)."""
    return (
        f"My {TOPICS[n % len(TOPICS)]} from {CITIES[(n // len(TOPICS)) % len(CITIES)]} has the tag K{n:05d}."
    )


def index_state(mem: memtap.Memory, entities: int) -> tuple[int, int, int]:
    """(facts indexed, of which without any vector, of which with only the quick one)."""
    return findable(mem, [f"bulk-e{e}" for e in range(entities)])


def embedder_rate(mem: memtap.Memory, texts: list[str]) -> float | None:
    """Texts/s of the embedder's full model alone, in this thread."""
    embedder = mem.longterm.engine.embedder
    if embedder is None:
        return None
    embedder.embed(texts[:8])  # loaded
    started = time.perf_counter()
    embedder.embed(texts)
    return len(texts) / (time.perf_counter() - started)


def run(facts: int, probe: int, entities: int) -> dict[str, Any]:
    home = tempfile.TemporaryDirectory()
    os.environ["MEMTAP_HOME"] = home.name
    mem = memtap.Memory(f"duckdb:///{Path(home.name) / 'bulk.duckdb'}")
    deadline = RecallBudget().deadline
    rate_alone = embedder_rate(mem, [fact_text(n) for n in range(10_000_000, 10_000_256)])
    for e in range(entities):  # the indexes loaded, as in a running app
        mem.recall("warm up", entity_id=f"bulk-e{e}")
    windows: list[dict[str, Any]] = []
    latencies: list[float] = []
    found: list[bool] = []
    started = window_start = time.perf_counter()
    for n in range(facts):
        entity = f"bulk-e{n % entities}"
        fact = mem.remember(fact_text(n), entity_id=entity)
        if (n + 1) % probe == 0:
            entry = mem.longterm.engine.indexes.get(entity, wait=False)
            index = entry.index if entry is not None else None
            found.append(index is not None and index.vector_of(fact.id) is not None)
            asked = time.perf_counter()
            mem.recall(PROBE_QUESTION, entity_id=entity, k=5, deadline=deadline)
            latencies.append((time.perf_counter() - asked) * 1e3)
            indexed, blind, quick = index_state(mem, entities)
            now = time.perf_counter()
            windows.append(
                {
                    "facts": n + 1,
                    "remember_per_s": probe / (now - window_start),
                    "findable_at_once": found[-1],
                    "probe_ms": latencies[-1],
                    "indexed": indexed,
                    "without_any_vector": blind,
                    "quick_only": quick,
                }
            )
            w = windows[-1]
            print(
                f"{w['facts']:7d} facts: {w['remember_per_s']:7.0f} remember/s; the last "
                f"{'has a vector' if w['findable_at_once'] else 'has NO vector'} at once; a full-model "
                f"recall {w['probe_ms']:.1f} ms; {w['without_any_vector']} without any vector, "
                f"{w['quick_only']} quick only (of {w['indexed']} indexed)",
                flush=True,
            )
            window_start = time.perf_counter()
    written_s = time.perf_counter() - started
    mem.flush(120)
    waited = time.perf_counter()
    while True:
        _, blind, quick = index_state(mem, entities)
        if (not quick and not blind) or time.perf_counter() - waited > 1800:
            break
        time.sleep(1.0)
    full_s = time.perf_counter() - started
    indexed, blind, quick = index_state(mem, entities)
    mem.close()
    home.cleanup()
    return {
        "facts": facts,
        "entities": entities,
        "deadline_ms": deadline * 1e3,
        "written_s": written_s,
        "all_full_vectors_s": full_s,
        "full_vectors_per_s": facts / full_s,
        "embedder_alone_per_s": rate_alone,
        "probes": len(found),
        "findable_at_once": sum(found),
        "probe_p50_ms": statistics.median(latencies) if latencies else None,
        "probe_max_ms": max(latencies) if latencies else None,
        "probes_over_deadline": sum(ms > deadline * 1e3 for ms in latencies),
        "left_without_full_vector": quick + blind,
        "windows": windows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--facts", type=int, default=50_000)
    parser.add_argument("--probe", type=int, default=1000)
    parser.add_argument("--entities", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.facts, args.probe, args.entities)
    print(
        f"{result['facts']} facts written in {result['written_s']:.1f} s; every full vector after "
        f"{result['all_full_vectors_s']:.1f} s ({result['full_vectors_per_s']:.0f}/s; the embedder alone "
        f"{result['embedder_alone_per_s'] or 0:.0f}/s on one thread); findable by meaning at once "
        f"{result['findable_at_once']}/{result['probes']}; full-model recall p50 "
        f"{result['probe_p50_ms']:.1f} ms, max "
        f"{result['probe_max_ms']:.1f} ms ({result['probes_over_deadline']} over the "
        f"{result['deadline_ms']:.0f} ms deadline)"
    )
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
