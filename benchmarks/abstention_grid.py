"""Choose the recall injector's threshold (``RecallBudget.min_score``) on TUNING data only.

For each tuning question the injector's view is taken (``k=12`` hits, as the injector asks
for twice its ``k=6``): answerable when its answer is stored, unanswerable when the same
question is asked with its answer left out (``exclude``: the near misses stay). For each
threshold: the share of unanswerable questions that would inject nothing, and the share of
answerable ones whose answer would be injected (among the first 6 hits scoring at least
the threshold). Sets: the paraphrase set's even positions (answers and traps) and, when
given, the LongMemEval-shaped tuning half (``--longmem``: its abstention kind and the
evidence of the others), read through ``benchmarks/memory_eval.py``.

    python benchmarks/abstention_grid.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fusion_grid import Paraphrases

THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
INJECTED = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", default="default")
    args = parser.parse_args()
    para = Paraphrases(args.embedder)
    engine = para.mem.longterm.engine
    ids = {f.text: f.id for f in para.mem.facts(entity_id="user")}
    answerable: list[tuple[int | None, list[float]]] = []
    unanswerable: list[float] = []
    for question, answer in para.questions:
        hits = engine.search(question, entity_id="user", k=2 * INJECTED) or []
        texts = [h.fact.text for h in hits]
        at = texts.index(answer) if answer in texts else None
        answerable.append((at, [h.score for h in hits]))
        left = engine.search(question, entity_id="user", k=2 * INJECTED, exclude=[ids[answer]]) or []
        unanswerable.append(left[0].score if left else 0.0)
    print(f"{'threshold':>9} {'nothing injected (unanswerable)':>32} {'answer injected (answerable)':>30}")
    for t in THRESHOLDS:
        quiet = sum(top < t for top in unanswerable) / len(unanswerable)
        kept = 0
        for at, scores in answerable:
            if at is not None and scores[at] >= t:
                kept += sum(s >= t for s in scores[:at]) < INJECTED
        print(f"{t:9.2f} {quiet:32.3f} {kept / len(answerable):30.3f}")
    para.mem.close()


if __name__ == "__main__":
    main()
