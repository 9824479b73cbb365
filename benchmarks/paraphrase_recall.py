"""Recall of questions asked in other words than their facts (``memtap.testing.paraphrases``).

One user's facts are remembered (``Memory.remember``), then each question is recalled
(``Memory.recall``, k=10) and we report recall@1/5/10 (the fact that answers it among the
top k), the share of queries sent to the full model and recall latency, for:

- ``default``: memtap's defaults (the quick query vector, escalating to the full model when
  the words of the question did not find its hits);
- ``minilm-full``: the full model for every query;
- ``quick only``: the quick vector, never escalating (what the default gives while the model
  is still loading or late);
- ``previous rule``: the default before this benchmark existed (escalating only when a query
  word occurs in no fact or the best hit scores below 0.2);
- ``words only``: BM25, no vectors (``embedder=False``).

over two haystacks: the answers only (120 facts), and the answers with facts that share
words with the questions but answer none (lexical traps, 240 facts).

    python benchmarks/paraphrase_recall.py [--json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from typing import Any

import memtap
from memtap.testing import paraphrases

KS = (1, 5, 10)
MODES = ("default", "minilm-full", "quick only", "previous rule", "words only")
#: Facts are remembered a minute apart (recency breaks ties: the same order every run).
T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)


def run(mode: str, traps: bool) -> dict[str, Any]:
    embedder: Any = {"minilm-full": "minilm-full", "words only": False}.get(mode, "default")
    mem = memtap.Memory("memory://", embedder=embedder, spool=False)
    engine = mem.longterm.engine
    prepare = getattr(engine.embedder, "prepare_quick_queries", None)
    if prepare is not None and engine.embedder.quick_queries:  # type: ignore[union-attr]
        prepare()
    if mode == "quick only":
        engine._words_carry = lambda *_: True  # type: ignore[method-assign]
    elif mode == "previous rule":
        engine.escalate_share = 0.0
        engine.escalate_shared = 0
    texts = paraphrases.facts() if traps else [fact for fact, _ in paraphrases.PAIRS]
    for i, text in enumerate(texts):
        mem.remember(text, entity_id="user", at=T0 + _dt.timedelta(minutes=i))
    mem.recall("warm up", entity_id="user")  # load and embed everything
    ranks: list[int | None] = []
    latencies: list[float] = []
    for question, answer in paraphrases.questions():
        started = time.perf_counter()
        found = [s.text for s in mem.recall(question, entity_id="user", k=max(KS))]
        latencies.append(time.perf_counter() - started)
        ranks.append(found.index(answer) if answer in found else None)
    stats = mem.recall_stats()
    mem.close()
    n = len(ranks)
    lat = sorted(latencies)
    return {
        "mode": mode,
        "haystack": "answers + traps" if traps else "answers",
        "facts": len(texts),
        "questions": n,
        **{f"R@{k}": sum(r is not None and r < k for r in ranks) / n for k in KS},
        "full_model_share": (stats.escalations / stats.quick_queries) if stats.quick_queries else None,
        "latency_ms": {"p50": lat[n // 2] * 1e3, "p95": lat[int(n * 0.95)] * 1e3},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(mode, traps) for traps in (False, True) for mode in MODES]
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        return
    print(
        f"{'haystack':16} {'mode':14} " + " ".join(f"{'R@' + str(k):>6}" for k in KS) + "  full model  p50 ms"
    )
    for r in results:
        share = "" if r["full_model_share"] is None else f"{r['full_model_share']:.2f}"
        print(
            f"{r['haystack']:16} {r['mode']:14} "
            + " ".join(f"{r[f'R@{k}']:6.3f}" for k in KS)
            + f"  {share:>10}  {r['latency_ms']['p50']:6.2f}"
        )
    print(
        f"{results[0]['questions']} questions; facts: answers {len(paraphrases.PAIRS)}, "
        f"answers + traps {len(paraphrases.facts())}"
    )


if __name__ == "__main__":
    main()
