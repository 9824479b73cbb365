"""LOCOMO evidence recall: does memtap's recall find the turns that answer a question?

For each of the 10 LOCOMO conversations, every turn is stored as a fact of that
conversation's entity ("Speaker: text", plus a shared photo's caption), with the session's
date and the ``--window`` turns on either side as its indexed context. Then every question of
categories 1-4 (single-hop, temporal, multi-hop, open-domain) is recalled through
``Memory.recall`` and we report recall@1/5/10/20 (an evidence turn among the top k) per
category and overall, and recall latency p50/p95 (query embedding included).

The dataset (CC BY-NC 4.0, research use only) is read from ``--data`` (default
``$LOCOMO_PATH`` or ``/work/shared/data/locomo/locomo10.json``) and never copied.

    python benchmarks/locomo_recall.py [--embedder default|minilm-full|off] [--window 2] [--json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import memtap
from memtap.model import Fact

DEFAULT_DATA = "/work/shared/data/locomo/locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10, 20)


def turns(conversation: dict[str, Any]) -> list[tuple[str, str, str, str, int]]:
    """(dia_id, speaker, text, session date, session number) for every turn, in order."""
    out = []
    s = 1
    while f"session_{s}" in conversation:
        date = conversation.get(f"session_{s}_date_time", "")
        for t in conversation[f"session_{s}"]:
            text = t["text"]
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            out.append((t["dia_id"], t["speaker"], text, date, s))
        s += 1
    return out


def facts_of(sample: dict[str, Any], window: int) -> list[Fact]:
    ts = turns(sample["conversation"])
    base = _dt.datetime(2023, 1, 1, tzinfo=_dt.timezone.utc)
    facts = []
    for i, (dia_id, speaker, text, date, session) in enumerate(ts):
        context = [date]
        for j in range(max(0, i - window), min(len(ts), i + window + 1)):
            if j != i and ts[j][4] == session:
                context.append(f"{ts[j][1]}: {ts[j][2]}")
        facts.append(
            Fact(
                entity_id=sample["sample_id"],
                text=f"{speaker}: {text}",
                kind="episode",
                created_at=base + _dt.timedelta(minutes=i),
                metadata={"context": "\n".join(context), "dia_id": dia_id},
            )
        )
    return facts


def run(data: list[dict[str, Any]], embedder: str, window: int) -> dict[str, Any]:
    mem = memtap.Memory("memory://", embedder=False if embedder == "off" else embedder, spool=False)
    prepare = getattr(mem.longterm.engine.embedder, "prepare_quick_queries", None)
    if prepare is not None and mem.longterm.engine.embedder.quick_queries:  # type: ignore[union-attr]
        prepare()
    hits: dict[int, dict[int, list[bool]]] = {c: {k: [] for k in KS} for c in CATEGORIES}
    latencies: list[float] = []
    started = time.perf_counter()
    for sample in data:
        facts = facts_of(sample, window)
        mem.store.add_facts(facts)
        mem.longterm.engine.added(facts)
        dia = {f.id: f.metadata["dia_id"] for f in facts}
        mem.recall("warm up", entity_id=sample["sample_id"])  # load + embed every turn
        for qa in sample["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            t0 = time.perf_counter()
            found = mem.recall(qa["question"], entity_id=sample["sample_id"], k=max(KS))
            latencies.append(time.perf_counter() - t0)
            ids = [dia[s.fact.id] for s in found]
            evidence = set(qa["evidence"])
            for k in KS:
                hits[qa["category"]][k].append(bool(evidence & set(ids[:k])))
    elapsed = time.perf_counter() - started
    mem.close()
    per = {
        CATEGORIES[c]: {"n": len(h[1]), **{f"R@{k}": statistics.fmean(h[k]) for k in KS}}
        for c, h in hits.items()
    }
    every = [x for h in hits.values() for x in h[1]]
    overall = {
        "n": len(every),
        **{f"R@{k}": statistics.fmean([x for h in hits.values() for x in h[k]]) for k in KS},
    }
    lat = sorted(latencies)
    return {
        "embedder": embedder,
        "window": window,
        "per_category": per,
        "overall": overall,
        "latency_ms": {"p50": lat[len(lat) // 2] * 1e3, "p95": lat[int(len(lat) * 0.95)] * 1e3},
        "total_s": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=os.environ.get("LOCOMO_PATH", DEFAULT_DATA))
    parser.add_argument(
        "--embedder",
        default="default",
        help="embedder spec ('minilm-full': queries through the full model), or 'off' for BM25 only",
    )
    parser.add_argument("--window", type=int, default=2, help="neighbour turns indexed as context")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    path = Path(args.data)
    if not path.is_file():
        print(f"LOCOMO not found at {path}: skipped (set --data or LOCOMO_PATH)")
        return
    result = run(json.loads(path.read_text()), args.embedder, args.window)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        return
    print(f"embedder={result['embedder']} window={result['window']} ({result['total_s']:.0f} s)")
    print(f"{'category':12} {'n':>5} " + " ".join(f"{'R@' + str(k):>6}" for k in KS))
    for name, row in [*result["per_category"].items(), ("overall", result["overall"])]:
        print(f"{name:12} {row['n']:5d} " + " ".join(f"{row[f'R@{k}']:6.3f}" for k in KS))
    lat = result["latency_ms"]
    print(f"recall latency: p50 {lat['p50']:.2f} ms, p95 {lat['p95']:.2f} ms")


if __name__ == "__main__":
    main()
