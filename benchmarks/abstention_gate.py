"""Injection gates measured offline on the injector's candidates: false injection and
evidence injected per kind, without storing or asking anything again.

    python benchmarks/memory_eval.py --set longmem --half tune --per-question lm.jsonl --candidates
    python benchmarks/memory_eval.py --set locomo --half tune --per-question lc.jsonl --candidates
    python benchmarks/abstention_gate.py lm.jsonl lc.jsonl [--gate NAME]... [--fit] [--question-features]

Each record of ``--per-question ... --candidates`` carries the hits the recall injector
weighs for its question (the same search, best first, with their score parts, gold flag
and the full model's cosine of the text alone). A *gate* says of each (question, hit)
whether the hit may be injected; the block is then made as ``RecallPlugin`` makes it (at
most ``k`` lines within ``max_tokens``, a line costing ``1 + len(line) // 4``). Reported per
set, half and path: *false injection* (abstention questions that get any line) and
*evidence injected* (questions with evidence whose block holds a gold hit), overall and per
kind, as ``memory_eval.py`` counts them.

``--fit`` fits the logistic gate on the records given (use tuning halves only): a hit is
kept when ``sigmoid(w . features) >= threshold``; positives are the gold hits of
answerable questions, negatives every hit of an abstention question (the other hits of
answerable questions are neither: injecting them is not what the figures count). It prints
the coefficients to paste into the gate and the figures at each threshold.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np

from memtap.longterm.answerable import (
    about_the_one_named,
    asks_for_name,
    asks_for_number,
    can_answer,
    name_focus,
    names_something,
)
from memtap.longterm.recall_injector import HEADER, RecallBudget
from memtap.longterm.text import terms

Record = dict[str, Any]
Candidate = dict[str, Any]
Gate = Callable[[str, Candidate], bool]
_SPACES = re.compile(r"\s+")
_TITLE = re.compile(r"\btitle\b", re.IGNORECASE)
#: What ``fact_line`` puts before a fact's text ("- [2024-01-01] the user said: ").
_LINE_PREFIX = len("- [2024-01-01] the user said: ")


def read(paths: Iterable[str]) -> list[Record]:
    """The records of ``paths`` that carry candidates."""
    out = []
    for path in paths:
        with open(path) as f:
            out += [r for r in map(json.loads, f) if "candidates" in r]
    return out


def block(
    question: str, candidates: Sequence[Candidate], gate: Gate, budget: RecallBudget
) -> list[Candidate]:
    """The hits a block would carry under ``gate``, as the injector fills it."""
    lines: list[Candidate] = []
    used = len(HEADER) // 4
    for c in candidates:
        if not gate(question, c) or len(lines) >= budget.k:
            continue
        cost = 1 + (_LINE_PREFIX + len(_SPACES.sub(" ", c["text"]).strip())) // 4
        if used + cost > budget.max_tokens:
            continue
        lines.append(c)
        used += cost
    return lines


def figures(records: Sequence[Record], gate: Gate, budget: RecallBudget | None = None) -> dict[str, Any]:
    """False injection and evidence injected per (set, half, path), overall and per kind."""
    budget = budget or RecallBudget()
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[r["set"], r["half"], r["path"]].append(r)
    out: dict[str, Any] = {}
    for (name, half, path), rows in sorted(groups.items()):
        kinds: dict[str, list[bool]] = defaultdict(list)
        never: list[bool] = []
        for r in rows:
            kept = block(r["question"], r["candidates"], gate, budget)
            if r["kind"] == "abstention":
                never.append(bool(kept))
            elif r["evidence"]:
                hit = any(c["gold"] for c in kept)
                kinds[r["kind"]].append(hit)
                kinds["overall"].append(hit)
        out[f"{name}/{half}/{path}"] = {
            "false_injection": (sum(never) / len(never)) if never else None,
            "abstention": len(never),
            "evidence_injected": {k: (sum(v) / len(v), len(v)) for k, v in kinds.items()},
        }
    return out


def show(title: str, result: dict[str, Any]) -> str:
    """One gate's figures, one line per set, half and path."""
    lines = [f"== {title}"]
    for key, f in result.items():
        ev = f["evidence_injected"]
        false = "   -" if f["false_injection"] is None else f"{f['false_injection']:.2f}"
        kinds = " ".join(f"{k} {v:.2f}" for k, (v, _) in ev.items() if k != "overall")
        lines.append(
            f"{key:28} false {false} (of {f['abstention']})  evidence {ev['overall'][0]:.3f}"
            f" (of {ev['overall'][1]})  | {kinds}"
        )
    return "\n".join(lines)


def no_gate(question: str, c: Candidate) -> bool:
    """Every hit the search returns (at ``min_score``) is injected."""
    return True


def answer_kind(question: str, c: Candidate) -> bool:
    """The shipped check: a hit that cannot answer the kind of question asked is left out."""
    return can_answer(question, c["text"])


def answer_kind_before_focus(question: str, c: Candidate) -> bool:
    """The check as shipped before the focus rule (a name asked: the hit names someone
    besides the question's words and shares a word with it; a number asked: it has one)."""
    text = c["text"]
    if asks_for_name(question) and not (
        names_something(text, besides=question) and about_the_one_named(question, text)
    ):
        return False
    return not asks_for_number(question) or can_answer("how much?", text)


def answer_kind_before_subject(question: str, c: Candidate) -> bool:
    """The check as shipped before the subject rules (issue 34, 2026-12-06: someone else's
    work, the user's own thing, the name in the thing's sentence, an age, an amount): the
    check before the focus rule, and a name or title asked needs a fact mentioning its
    focus."""
    if not answer_kind_before_focus(question, c):
        return False
    focus = name_focus(question) if asks_for_name(question) or _TITLE.search(question) else None
    return not focus or not set(terms(focus)).isdisjoint(terms(c["text"]))


GATES: dict[str, Gate] = {
    "none": no_gate,
    "answer-kind-before-focus": answer_kind_before_focus,
    "answer-kind-before-subject": answer_kind_before_subject,
    "answer-kind": answer_kind,
}


def features(c: Candidate, top: float) -> list[float]:
    """The logistic gate's features of one hit: bias, fused score, cosine with the query
    vector recall used, share of the question's IDF mass covered, score over the
    question's top score, an assistant's turn."""
    cosine = c["cosine"] if c["cosine"] is not None and c["cosine"] >= 0 else 0.0
    relative = c["score"] / top if top else 0.0
    return [1.0, c["score"], cosine, c["coverage"] or 0.0, relative, float(c["role"] == "assistant")]


def fit(records: Sequence[Record], l2: float = 1e-2) -> np.ndarray[Any, Any]:
    """Logistic regression (Newton steps, classes weighted equally, L2 ``l2``) of gold hits
    (positive) against hits of abstention questions (negative), on hits the answer-kind
    check keeps."""
    rows: list[list[float]] = []
    labels: list[float] = []
    for r in records:
        top = max((c["score"] for c in r["candidates"]), default=0.0)
        for c in r["candidates"]:
            if not answer_kind(r["question"], c):
                continue
            if r["kind"] == "abstention" or (r["evidence"] and c["gold"]):
                rows.append(features(c, top))
                labels.append(float(r["kind"] != "abstention"))
    x, y = np.array(rows), np.array(labels)
    weight = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    w = np.zeros(x.shape[1])
    for _ in range(50):
        p = 1 / (1 + np.exp(-x @ w))
        hessian = (x * (weight * p * (1 - p))[:, None]).T @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(hessian, x.T @ (weight * (p - y)) + l2 * w)
    return w


def logistic_gate(w: np.ndarray[Any, Any], threshold: float) -> Gate:
    """Keep a hit the answer-kind check keeps whose fitted probability is ``threshold`` or more."""

    def gate(question: str, c: Candidate) -> bool:
        p = 1 / (1 + math.exp(-float(np.dot(w, features(c, c["_top"])))))
        return answer_kind(question, c) and p >= threshold

    return gate


def question_features(candidates: Sequence[Candidate]) -> dict[str, float]:
    """Per-question features of the injector's hits (best first): the top score, its
    z-score among the question's hits, its margin over the 6th, whether BM25's and the
    vector's best are the same hit, the best full-model cosine, the top hit's coverage."""
    if not candidates:
        return dict.fromkeys(("top", "z", "margin", "agree", "full_cosine", "coverage"), 0.0)
    scores = np.array([c["score"] for c in candidates])
    bm25 = np.array([c["bm25"] or 0.0 for c in candidates])
    cosine = np.array([c["cosine"] or 0.0 for c in candidates])
    return {
        "top": float(scores[0]),
        "z": float((scores[0] - scores.mean()) / (scores.std() + 1e-9)),
        "margin": float(scores[0] - scores[min(5, len(scores) - 1)]),
        "agree": float(np.argmax(bm25) == np.argmax(cosine)),
        "full_cosine": max(float(c["full_cosine"]) for c in candidates),
        "coverage": float(candidates[0]["coverage"] or 0.0),
    }


def auc(positive: Sequence[float], negative: Sequence[float]) -> float:
    """Probability that a positive is above a negative (ties count a half)."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positive for n in negative]
    return sum(pairs) / len(pairs) if pairs else float("nan")


def show_question_features(records: Sequence[Record]) -> str:
    """AUC of each per-question feature, answerable (with evidence) against abstention
    questions, per set, half and path (sets with abstention questions only)."""
    lines = ["== per-question features, AUC answerable vs never answered"]
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[r["set"], r["half"], r["path"]].append(r)
    for (name, half, path), rows in sorted(groups.items()):
        pos = [
            question_features(r["candidates"]) for r in rows if r["kind"] != "abstention" and r["evidence"]
        ]
        neg = [question_features(r["candidates"]) for r in rows if r["kind"] == "abstention"]
        if pos and neg:
            figs = " ".join(f"{k} {auc([p[k] for p in pos], [n[k] for n in neg]):.2f}" for k in pos[0])
            lines.append(f"{name}/{half}/{path:9} {figs}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+")
    parser.add_argument("--gate", action="append", choices=list(GATES))
    parser.add_argument("--question-features", action="store_true", help="AUC of per-question score features")
    parser.add_argument(
        "--fit", action="store_true", help="fit the logistic gate on the longmem records given"
    )
    args = parser.parse_args(argv)
    records = read(args.files)
    for r in records:
        top = max((c["score"] for c in r["candidates"]), default=0.0)
        for c in r["candidates"]:
            c["_top"] = top
    for name in args.gate or list(GATES):
        print(show(name, figures(records, GATES[name])))
    if args.question_features:
        print(show_question_features(records))
    if args.fit:
        w = fit([r for r in records if r["set"] == "longmem"])
        print(
            "logistic weights (bias, score, cosine, coverage, relative, assistant):", np.round(w, 3).tolist()
        )
        for threshold in (0.3, 0.4, 0.5, 0.6, 0.7):
            print(show(f"logistic >= {threshold}", figures(records, logistic_gate(w, threshold))))


if __name__ == "__main__":
    main()
