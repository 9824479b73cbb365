"""A learned answer gate over MiniLM vectors, tested leave-one-author-out on LongMem.

    python benchmarks/memory_eval.py --set longmem --half tune --per-question lm_tune.jsonl --candidates
    python benchmarks/memory_eval.py --set longmem --half heldout --per-question lm_heldout.jsonl --candidates
    python benchmarks/memory_eval.py --set locomo --half tune --path remember \\
        --per-question lc_tune.jsonl --candidates
    python benchmarks/answer_gate_loao.py lm_tune.jsonl lm_heldout.jsonl \\
        [--locomo lc_tune.jsonl] --cache DIR/vectors.npz [--features scalars,product,question]...

For each LongMem author (a user's author is the first letter of its id) a logistic gate is
fitted on the other authors' records and tested on that author's: a hit is kept when
``can_answer`` keeps it and the gate's probability (of the hit, or the best one among the
question's hits that ``can_answer`` keeps: ``question`` level) is at least a threshold. The
block is made as ``abstention_gate.block`` makes it (``RecallBudget``'s defaults). Printed
per fold and as the mean over folds: *false injection* (abstention questions given any
line) and *evidence injected* (questions with evidence whose block holds a gold hit), per
answerable kind, beside today's gate (``can_answer`` at ``min_score``) on the same fold.
``--locomo``: evidence injected on those records (no abstention questions there) by the
gate fitted on every LongMem author. ``--no-rules``: the learned gate alone (``can_answer``
neither a feature nor a condition; "today" stays the shipped gate).

To test on an author the rules were never written on, take ``can_answer`` as it was before
(``--verdicts``): run this script under that version's sources with ``--write-verdicts`` to
save its verdict on every (question, hit) pair, e.g. the rules of ``f496535`` (written on
authors a and b only, run once on c and d while they were fresh)::

    git archive f496535 core/src | tar -x -C /tmp/rules_f496535
    PYTHONPATH=/tmp/rules_f496535/core/src python benchmarks/answer_gate_loao.py \
        lm_tune.jsonl lm_heldout.jsonl lc_tune.jsonl --write-verdicts verdicts.json
    python benchmarks/answer_gate_loao.py ... --verdicts verdicts.json

"today" is then that version's gate too.

Features of a (question, hit) pair, chosen with ``--features`` (comma-separated):
``scalars`` the hit's score parts (fused score, quick cosine, BM25, coverage, score over
the question's top score, an assistant's turn, ``can_answer``, the full model's cosine,
rank, share of the question's terms in the hit, log length); ``product`` the elementwise
product of the question's and the hit's MiniLM vectors; ``distance`` their absolute
difference; ``question`` the question's vector itself. Vectors are the full model's
(``MiniLMEmbedder(quick_queries=False)``), cached in ``--cache`` by SHA-1 of the text.
Positives are the gold hits of answerable questions, negatives every hit of an abstention
question (as ``abstention_gate.py --fit`` counts them); classes weigh equally, features
are standardised, L2 ``1 / C`` on the weights (not the bias), fitted by Newton steps.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from abstention_gate import Candidate, Record, block, read

from memtap.longterm.answerable import can_answer
from memtap.longterm.recall_injector import RecallBudget
from memtap.longterm.text import terms

FEATURE_PARTS = ("scalars", "product", "distance", "question")
ANSWERABLE_KINDS = ("single", "multi", "update", "temporal", "paraphrase", "preference")
Array = np.ndarray[Any, Any]


def author(record: Record) -> str:
    """A LongMem record's author (its user id's first letter), else its set's name."""
    return str(record["user"][0]) if record["set"] == "longmem" else str(record["set"])


class Vectors:
    """Full-model MiniLM vectors of texts, cached in an ``.npz`` file by SHA-1 of the text."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.rows: dict[str, Array] = {}
        if cache.exists():
            stored = np.load(cache)
            self.rows = dict(zip(stored["keys"].tolist(), stored["vecs"]))

    @staticmethod
    def key(text: str) -> str:
        """The cache key of ``text``."""
        return hashlib.sha1(text.encode()).hexdigest()

    def add(self, texts: Sequence[str]) -> None:
        """Embed the texts not cached yet and save the cache."""
        missing = [t for t in dict.fromkeys(texts) if self.key(t) not in self.rows]
        if not missing:
            return
        from memtap_minilm import MiniLMEmbedder

        model = MiniLMEmbedder(quick_queries=False)
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            self.rows.update(zip(map(self.key, chunk), model.embed(chunk)))
        keys = list(self.rows)
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(self.cache, keys=np.array(keys), vecs=np.stack([self.rows[k] for k in keys]))

    def __getitem__(self, text: str) -> Array:
        return self.rows[self.key(text)]


def pair_key(question: str, text: str) -> str:
    """The key of a (question, hit text) pair in a verdicts file."""
    return f"{question}\x00{text}"


def prepare(records: Sequence[Record], verdicts: dict[str, bool] | None = None) -> None:
    """Note on each hit its rank, its question's top score and ``can_answer``'s verdict
    (from ``verdicts`` when given)."""
    for r in records:
        top = max((c["score"] for c in r["candidates"]), default=0.0)
        for rank, c in enumerate(r["candidates"]):
            can = (
                verdicts[pair_key(r["question"], c["text"])]
                if verdicts is not None
                else can_answer(r["question"], c["text"])
            )
            c["_top"], c["_rank"], c["_can"] = top, rank, can


def scalars(question: str, c: Candidate, rules: bool = True) -> list[float]:
    """The hit's score parts and lexical overlap with ``question`` (see the docstring);
    ``can_answer``'s verdict only with ``rules``."""
    asked, said = set(terms(question)), set(terms(c["text"]))
    cosine = c["cosine"] if c["cosine"] is not None and c["cosine"] >= 0 else 0.0
    out = [
        c["score"],
        cosine,
        c["bm25"] or 0.0,
        c["coverage"] or 0.0,
        c["score"] / c["_top"] if c["_top"] else 0.0,
        float(c["role"] == "assistant"),
        float(c["_can"]),
        c["full_cosine"],
        c["_rank"] / 12,
        len(asked & said) / max(1, len(asked)),
        math.log1p(len(c["text"])) / 6,
    ]
    return out if rules else out[:6] + out[7:]


def featurize(records: Sequence[Record], vectors: Vectors, parts: Sequence[str], rules: bool = True) -> None:
    """Set ``_x``, the feature row of ``parts``, on every hit of ``records``."""
    for r in records:
        q = vectors[r["question"]]
        for c in r["candidates"]:
            f = vectors[c["text"]]
            row: list[Array] = []
            if "scalars" in parts:
                row.append(np.array(scalars(r["question"], c, rules)))
            if "product" in parts:
                row.append(q * f)
            if "distance" in parts:
                row.append(np.abs(q - f))
            if "question" in parts:
                row.append(q)
            c["_x"] = np.concatenate(row)


def training_rows(records: Sequence[Record]) -> tuple[Array, Array]:
    """Gold hits of answerable questions (1) and every hit of abstention questions (0)."""
    rows, labels = [], []
    for r in records:
        for c in r["candidates"]:
            if r["kind"] == "abstention" or (r["evidence"] and c["gold"]):
                rows.append(c["_x"])
                labels.append(float(r["kind"] != "abstention"))
    return np.array(rows), np.array(labels)


def fit(x: Array, y: Array, c: float, steps: int = 30) -> Callable[[Array], Array]:
    """Logistic regression on standardised ``x`` (classes weighted equally, L2 ``1 / c``
    on the weights, the bias free), by Newton steps: the fitted probability function."""
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([(x - mean) / std, np.ones((len(x), 1))])
    weight = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    penalty = np.full(z.shape[1], 1 / c)
    penalty[-1] = 0.0
    w = np.zeros(z.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-z @ w))
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, z.T @ (weight * (p - y)) + penalty * w)
        w -= step
        if np.abs(step).max() < 1e-6:
            break

    def probability(rows: Array) -> Array:
        p: Array = 1 / (1 + np.exp(-(((rows - mean) / std) @ w[:-1] + w[-1])))
        return p

    return probability


def score(records: Sequence[Record], probability: Callable[[Array], Array]) -> None:
    """Set ``_p`` on each hit and ``_best`` (the best ``_p`` ``can_answer`` keeps) on each record."""
    for r in records:
        if r["candidates"]:
            for c, p in zip(r["candidates"], probability(np.array([c["_x"] for c in r["candidates"]]))):
                c["_p"] = float(p)
        r["_best"] = max((c["_p"] for c in r["candidates"] if c["_can"]), default=0.0)


def _keep_of(keep: Callable[[Record, Candidate], bool], record: Record, _question: str, c: Candidate) -> bool:
    return keep(record, c)


def evaluate(records: Sequence[Record], keep: Callable[[Record, Candidate], bool]) -> dict[str, float]:
    """False injection and evidence injected (overall, per kind) under ``keep``."""
    budget = RecallBudget()
    never: list[bool] = []
    hits: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        kept = block(r["question"], r["candidates"], functools.partial(_keep_of, keep, r), budget)
        if r["kind"] == "abstention":
            never.append(bool(kept))
        elif r["evidence"]:
            hit = any(c["gold"] for c in kept)
            hits[r["kind"]].append(hit)
            hits["evidence"].append(hit)
    out = {k: sum(v) / len(v) for k, v in hits.items()}
    out["false"] = sum(never) / len(never) if never else math.nan
    return out


def gates(thresholds: Sequence[float]) -> dict[str, Callable[[Record, Candidate], bool]]:
    """Today's gate and the learned gate at each threshold, per hit and per question."""
    out: dict[str, Callable[[Record, Candidate], bool]] = {
        "today": lambda r, c: bool(c.get("_shipped", c["_can"]))
    }
    for t in thresholds:
        out[f"hit p>={t}"] = functools.partial(_learned, t, False)
        out[f"question p>={t}"] = functools.partial(_learned, t, True)
    return out


def _learned(threshold: float, per_question: bool, r: Record, c: Candidate) -> bool:
    p = r["_best"] if per_question else c["_p"]
    return bool(c["_can"]) and float(p) >= threshold


def row(name: str, fold: str, f: dict[str, float]) -> str:
    """One Markdown table row."""
    kinds = " | ".join(f"{f.get(k, math.nan):.2f}" for k in ANSWERABLE_KINDS)
    return f"| {name} | {fold} | {f['false']:.3f} | {f['evidence']:.3f} | {kinds} |"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", help="longmem --per-question --candidates files")
    parser.add_argument("--locomo", help="a locomo --per-question --candidates file (evidence only)")
    parser.add_argument("--cache", type=Path, help="the .npz vector cache (outside the repo)")
    parser.add_argument("--verdicts", type=Path, help="can_answer's verdicts from --write-verdicts")
    parser.add_argument("--write-verdicts", type=Path, help="save can_answer's verdicts on the files' pairs")
    parser.add_argument("--features", action="append", help="comma-separated parts (default: all four)")
    parser.add_argument("--C", type=float, default=0.003, help="inverse L2 strength")
    parser.add_argument("--thresholds", default="0.2,0.3,0.4,0.5,0.6")
    parser.add_argument("--no-rules", action="store_true", help="the learned gate without can_answer")
    args = parser.parse_args(argv)
    if args.write_verdicts:
        pairs = {
            pair_key(r["question"], c["text"]): (r["question"], c["text"])
            for r in read(args.files)
            for c in r["candidates"]
        }
        args.write_verdicts.write_text(json.dumps({k: can_answer(q, t) for k, (q, t) in pairs.items()}))
        source = sys.modules[can_answer.__module__].__file__
        print(f"{len(pairs)} verdicts of {can_answer.__module__} ({source})")
        return
    if args.cache is None:
        parser.error("--cache is required")
    records = [r for r in read(args.files) if r["set"] == "longmem"]
    locomo = read([args.locomo]) if args.locomo else []
    prepare(records + locomo, json.loads(args.verdicts.read_text()) if args.verdicts else None)
    if args.no_rules:
        for c in (c for r in records + locomo for c in r["candidates"]):
            c["_shipped"], c["_can"] = c["_can"], True
    vectors = Vectors(args.cache)
    vectors.add([r["question"] for r in records + locomo])
    vectors.add([c["text"] for r in records + locomo for c in r["candidates"]])
    authors = sorted({author(r) for r in records})
    thresholds = [float(t) for t in args.thresholds.split(",")]
    header = "| gate | fold | false inj | evidence | " + " | ".join(ANSWERABLE_KINDS) + " |"
    for spec in args.features or [",".join(FEATURE_PARTS)]:
        parts = spec.split(",")
        unknown = set(parts) - set(FEATURE_PARTS)
        if unknown:
            parser.error(f"unknown feature parts {sorted(unknown)}; choose from {FEATURE_PARTS}")
        featurize(records + locomo, vectors, parts, rules=not args.no_rules)
        per_gate: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
        for held in authors:
            test = [r for r in records if author(r) == held]
            score(test, fit(*training_rows([r for r in records if author(r) != held]), args.C))
            for name, keep in gates(thresholds).items():
                per_gate[name][held] = evaluate(test, keep)
        rules = "without can_answer" if args.no_rules else "with can_answer"
        print(f"\n== features {spec}, C {args.C}, {rules}: leave one author out ({', '.join(authors)})")
        print(header + "\n|" + "---|" * (4 + len(ANSWERABLE_KINDS)))
        for name, folds in per_gate.items():
            for held, f in folds.items():
                print(row(name, held, f))
            keys = {k for f in folds.values() for k in f}
            mean = {k: float(np.nanmean([f.get(k, math.nan) for f in folds.values()])) for k in keys}
            print(row(name, "**mean**", mean))
        if locomo:
            score(locomo, fit(*training_rows(records), args.C))
            figures = " ".join(
                f"{name} {evaluate(locomo, keep)['evidence']:.3f}" for name, keep in gates(thresholds).items()
            )
            print(f"locomo evidence injected (fitted on every LongMem author): {figures}")


if __name__ == "__main__":
    main()
