"""LOCOMO evidence recall: does memtap's recall find the turns that answer a question?

Each of the 10 LOCOMO conversations is stored as the memory of one entity, every turn as
"Speaker: text" (plus a shared photo's caption), by one of three paths (``--path``):

- ``capture`` (public): each session's turns as consecutive pairs, ``Memory.capture([turn
  2k], [turn 2k+1], session_id=..., at=<session date>)`` -- a transcript imported as the
  user/assistant exchanges of one session; the episodes memorize makes of them are recalled;
- ``remember`` (public): ``Memory.remember(turn, context=<the --window turns on either side
  in the session>, at=<session date>)`` for every turn;
- ``internal``: facts built directly (``Fact(metadata={"context": date + neighbours})``,
  ``store.add_facts``), as this benchmark did before the public paths existed.

Then every question of categories 1-4 (single-hop, temporal, multi-hop, open-domain) is
recalled through ``Memory.recall`` (asked the day after the conversation's last session:
``now=``, what a time named in a question is relative to) and we report recall@1/5/10/20
(an evidence turn among the top k) per category and overall, and recall latency p50/p95
(query embedding included).
Nothing here is tuned on these questions: the paths use the defaults of ``memtap`` as they
are (its fusion parameters were chosen on conversations 0-4 and checked on 5-9; see
docs/benchmarks.md).

The dataset (CC BY-NC 4.0, research use only) is read from ``--data`` (default
``$LOCOMO_PATH`` or ``/work/shared/data/locomo/locomo10.json``) and never copied.

    python benchmarks/locomo_recall.py [--path all|capture|remember|internal]
        [--embedder default|minilm-full|off] [--window 2] [--json]
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
from memtap.protocol.model import Fact

sys.path.insert(0, str(Path(__file__).parent))
import recall_sets

DEFAULT_DATA = recall_sets.LOCOMO_DATA
CATEGORIES = recall_sets.LOCOMO_CATEGORIES
KS = (1, 5, 10, 20)
PATHS = ("capture", "remember", "internal")


def store_by_capture(mem: memtap.Memory, sample: dict[str, Any], warm: bool = False) -> dict[str, set[str]]:
    """Capture each session as consecutive (user, assistant) pairs; the dia_ids per text.
    With ``warm``, the entity's index is loaded first: each exchange's episodes are indexed
    as they are stored and their context completed in place by the next exchange (what a
    running application's index sees); without, it is loaded from the store at the end."""
    person = recall_sets.locomo_person(sample)
    if warm:
        mem.recall("warm up", entity_id=person.id)
    recall_sets.store_by_capture(mem, person)
    mem.flush(600)
    return recall_sets.ids_by_text(person.turns)


def store_by_remember(mem: memtap.Memory, sample: dict[str, Any], window: int) -> dict[str, set[str]]:
    """``remember`` every turn with its neighbours as context and its session's date."""
    person = recall_sets.locomo_person(sample)
    recall_sets.store_by_remember(mem, person, window)
    return recall_sets.ids_by_text(person.turns)


def facts_of(sample: dict[str, Any], window: int) -> list[Fact]:
    ts = recall_sets.locomo_turns(sample["conversation"])
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


def run(
    data: list[dict[str, Any]], embedder: str, window: int, path: str = "internal", warm: bool = False
) -> dict[str, Any]:
    mem = memtap.Memory("memory://", embedder=False if embedder == "off" else embedder, spool=False)
    prepare = getattr(mem.longterm.engine.embedder, "prepare_quick_queries", None)
    if prepare is not None and mem.longterm.engine.embedder.quick_queries:  # type: ignore[union-attr]
        prepare()
    hits: dict[int, dict[int, list[bool]]] = {c: {k: [] for k in KS} for c in CATEGORIES}
    latencies: list[float] = []
    started = time.perf_counter()
    for sample in data:
        if path == "internal":
            facts = facts_of(sample, window)
            mem.store.add_facts(facts)
            mem.longterm.engine.added(facts)
            dia = {f.id: {f.metadata["dia_id"]} for f in facts}
        else:
            by_text = (
                store_by_capture(mem, sample, warm)
                if path == "capture"
                else store_by_remember(mem, sample, window)
            )
            dia = {
                f.id: by_text.get(recall_sets.norm(f.text), set())
                for f in mem.facts(entity_id=sample["sample_id"])
            }
        mem.recall("warm up", entity_id=sample["sample_id"])  # load + embed every turn
        now = recall_sets.locomo_asked_at(sample["conversation"])
        for qa in sample["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            t0 = time.perf_counter()
            found = mem.recall(qa["question"], entity_id=sample["sample_id"], k=max(KS), now=now)
            latencies.append(time.perf_counter() - t0)
            ids = [dia[s.fact.id] for s in found]
            evidence = set(qa["evidence"])
            for k in KS:
                hits[qa["category"]][k].append(any(evidence & d for d in ids[:k]))
    elapsed = time.perf_counter() - started
    stats = mem.recall_stats()
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
        "path": path,
        "warm": warm,
        "embedder": embedder,
        "window": window,
        "per_category": per,
        "overall": overall,
        "latency_ms": {"p50": lat[len(lat) // 2] * 1e3, "p95": lat[int(len(lat) * 0.95)] * 1e3},
        # Of the searches made with a quick query vector, those that asked the full model too.
        "full_model_share": stats.escalations / stats.quick_queries if stats.quick_queries else None,
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
    parser.add_argument(
        "--path", choices=["all", *PATHS], default="all", help="how the conversations are stored"
    )
    parser.add_argument(
        "--conversations", default="", help="which conversations, e.g. 0-4 or 5,7 (default: all)"
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="capture path: load each entity's index before its turns are captured (updated in place)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    source = Path(args.data)
    if not source.is_file():
        print(f"LOCOMO not found at {source}: skipped (set --data or LOCOMO_PATH)")
        return
    data = json.loads(source.read_text())
    if args.conversations:
        data = [data[i] for i in _selection(args.conversations)]
    results = [
        run(data, args.embedder, args.window, p, args.warm)
        for p in (PATHS if args.path == "all" else [args.path])
    ]
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        return
    for result in results:
        print(
            f"path={result['path']}{' (warm index)' if result['warm'] else ''} "
            f"embedder={result['embedder']} window={result['window']} "
            f"({result['total_s']:.0f} s)"
        )
        print(f"{'category':12} {'n':>5} " + " ".join(f"{'R@' + str(k):>6}" for k in KS))
        for name, row in [*result["per_category"].items(), ("overall", result["overall"])]:
            print(f"{name:12} {row['n']:5d} " + " ".join(f"{row[f'R@{k}']:6.3f}" for k in KS))
        lat = result["latency_ms"]
        share = result["full_model_share"]
        asked = "" if share is None else f"; {share:.0%} of quick-vector searches asked the full model too"
        print(f"recall latency: p50 {lat['p50']:.2f} ms, p95 {lat['p95']:.2f} ms{asked}\n")


def _selection(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


if __name__ == "__main__":
    main()
