"""Memory quality per kind of question, against two baselines on the same units, in halves.

    python benchmarks/memory_eval.py [--set longmem|locomo|paraphrase|fresh|all (default)]
        [--half tune (default)|heldout|all] [--path capture|remember|all (default)]
        [--quick] [--longmem DIR] [--locomo FILE] [--json | --markdown]
        [--per-question FILE] [--from-json FILE]

Tune on the ``tune`` half only; the ``heldout`` half is run to report, never to choose.

Sets and halves (read by ``recall_sets.py``)
--------------------------------------------
- ``longmem``: ``benchmarks/longmem/users_*.json`` and ``filler_*.json`` (format and halves:
  ``benchmarks/longmem/README.md``; a user is tuning when the first hex digit of
  sha256(its id) is even). A user's filler sessions are dated at times drawn uniformly from
  30 days before its first session to 30 days after its last (never after its first
  question), seeded by the user's id.
- ``locomo``: ``/work/shared/data/locomo/locomo10.json`` (read there, never copied; research use
  only), conversations 0-4 tune, 5-9 held out, categories 1-4, as ``locomo_recall.py`` stores
  and asks them (turns "Speaker: text" in position pairs, asked the day after the last session).
- ``fresh``: ``benchmarks/longmem_fresh/users_*.json`` (two authors' users, written on
  2026-12-06 apart from the ranking code, after the rules were tuned on both halves of
  ``longmem``), every user held out (``--half heldout``; its tuning half is empty), their
  filler from ``benchmarks/longmem``'s files, placed as ``longmem``'s. ``--fresh DIR`` reads
  another such folder: ``benchmarks/longmem_fresh2`` (authors g and h, written the same way,
  run once to report on 2026-12-07, its failures never read) is the next held-out set, for
  when ``longmem_fresh`` has been spent.
- ``paraphrase``: ``memtap.testing.paraphrases`` as one user's facts, each said alone in a
  session of its own a minute apart: the pairs at even positions (tune) or odd (held out),
  and every distractor in both halves; asked a day after the last.

Paths: a fresh ``memtap.Memory("memory://", spool=False)`` per set, half and path, with the
default embedder (memtap-minilm, quick query vectors as shipped, their table prepared first)
and the shipped defaults, but for the injector's deadline (below).

- ``capture``: every session (own and filler, in time order) as consecutive (user, assistant)
  pairs, ``Memory.capture([user], [assistant], entity_id=, session_id=, at=<the pair's
  first turn's time>)``; then ``mem.flush()``: the units are the episodes memorize made.
- ``remember``: ``Memory.remember(turn, entity_id=, context=<the 2 turns on either side in its
  session>, at=<turn time>)`` for every turn.

How each figure is computed
---------------------------
- Units: ``mem.facts(entity_id=user)`` after storing. A unit stands for every turn whose
  text is its text (whitespace collapsed, lower case). A unit is *gold* for a question when
  it stands for one of its evidence turns, *stale* when for one of its stale turns.
  "evidence turns without a unit": distinct evidence turns (over the questions asked) whose
  text no unit has (memorize keeps no question or small talk as an episode).
- Rankers, over exactly the path's units of the user:
  ``memtap``: ``mem.recall(question, entity_id=, k=10, now=asked_at)`` (``update``
  questions: k = every unit, the full ranking), defaults otherwise; the units recall does
  not return (it leaves out those scoring 0) are absent.
  ``dense``: cosine of the full MiniLM model's vectors (``MiniLMEmbedder(quick_queries=False)``)
  of the unit's text (only) and of the question; every unit is ranked; ties keep the order
  of ``mem.facts`` (newest first).
  ``bm25``: Okapi BM25 (k1 1.2, b 0.75, IDF ln(1 + (N - df + 0.5) / (df + 0.5)), query terms
  counted with repeats) over lower-cased word tokens of the unit's text, minus the NLTK
  English stop list, no stemming; units scoring 0 are not ranked (absent); ties as dense.
- R@k (k = 1, 5, 10): share of the questions with evidence where a gold unit is among the
  ranker's first k (a question whose evidence has no unit is a miss for every ranker;
  a question of another kind than ``abstention`` naming no evidence, as 4 of LOCOMO's do,
  is left out and counted in ``without_evidence``).
  ``overall`` is over every question with evidence. ``all@10`` (shown for ``multi``): every
  evidence turn has a unit among the first 10.
- ``update`` newest above stale: share of ``update`` questions whose best-ranked gold unit
  ranks above every stale unit; a unit absent from the ranking ranks last (both absent: no).
- Injection, at the shipped defaults (``RecallBudget``: k 6, 300 tokens, min score 0.05) but
  a deadline of 30 s instead of 50 ms, so that a loaded machine does not turn the result into
  lexical-only recall, and twice: first with ``model_wait`` 0 (*at once*: a question the
  quick vector does not settle is answered without the full model, as a latency-bound
  request path would; its full vector is made meanwhile), then with ``model_wait`` up to
  the deadline (the figure without a suffix: the full model waited for, as the shipped
  default does on an idle machine). Each question is injected before it is recalled, so
  the full model's vector of it is not cached for the first call.
  Every question is put to the Memory's plugin manager as the tap
  puts a call (``pm.hook.memtap_request_injections`` with an ``InjectionRequest`` of one
  user message in a new session, entity = the user, protocol ``openai.chat``; contributions
  merged by ``merge_injections``), so every injector and any gate added to them is measured.
  The clock recall reads (``memtap.longterm.recall.utcnow``) is set to the question's
  ``asked_at`` for the call: a time the question names is relative to when it is asked.
  *false injection*: share of ``abstention`` questions that got any ``memory`` block;
  *evidence injected*: share of questions with evidence whose block carries a gold unit
  (the block's fact ids). *AUC*: probability that an answerable question's top score (memtap:
  ``recall``'s first score; dense: the best cosine; 0 when nothing is ranked) is above an
  abstention question's (ties count a half); needs both kinds (longmem only).
- Capture path, memtap: *assistant share of top 10*: of all first-10 slots filled, those
  holding an assistant turn's episode; *misses topped by the assistant*: of the questions
  with evidence and no gold unit in the first 10, those whose first hit is an assistant's.

``--json`` prints every figure; ``--per-question FILE`` writes one JSON line per question and
path (ranks per ranker, first hits, what was injected) for diagnosis, of the tuning half only
unless ``--half heldout`` is asked for by name (so that diagnosing does not mean reading it).
``--markdown``: the tables as docs/benchmarks.md shows them; ``--from-json FILE``: the tables
of a saved ``--json`` output, without running anything. ``--quick``: the tuning half of
paraphrase and longmem (no LOCOMO), for ``nox -s benchmarks``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import functools
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import numpy as np

import memtap
import memtap.longterm.recall as recall_module
from memtap.longterm.recall_injector import RecallBudget
from memtap.protocol.model import Attribution, Fact, Message
from memtap.protocol.wire import InjectionRequest, RequestView
from memtap.request.tap import merge_injections

sys.path.insert(0, str(Path(__file__).parent))
import recall_sets
from recall_sets import Person, Question

SETS = ("longmem", "locomo", "paraphrase", "fresh")
HALVES = ("tune", "heldout")
PATHS = ("capture", "remember")
RANKERS = ("memtap", "dense", "bm25")
KS = (1, 5, 10)
LONGMEM_DIR = Path(__file__).parent / "longmem"
#: A LongMemEval-shaped set written after the rules were tuned, only ever run to report:
#: all held out (its README).
FRESH_DIR = Path(__file__).parent / "longmem_fresh"
#: The injector's deadline here (seconds; shipped: 0.05): generous, so that a slow, loaded
#: machine measures the same injections as a quiet one.
INJECTION_DEADLINE = 30.0

# The NLTK English stop list (179 words), as published: a standard list for a plain baseline.
_NLTK_STOP_TEXT = """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
    yourselves he him his himself she she's her hers herself it it's its itself they them their
    theirs themselves what which who whom this that that'll these those am is are was were be
    been being have has had having do does did doing a an the and but if or because as until
    while of at by for with about against between into through during before after above below
    to from up down in out on off over under again further then once here there when where why
    how all any both each few more most other some such no nor not only own same so than too
    very s t can will just don don't should should've now d ll m o re ve y ain aren aren't
    couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma
    mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren
    weren't won won't wouldn wouldn't"""
NLTK_STOP_WORDS = frozenset(_NLTK_STOP_TEXT.split())
_WORD = re.compile(r"[^\W_]+")


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` (apostrophes split words), stop words removed."""
    return [w for w in _WORD.findall(text.lower()) if w not in NLTK_STOP_WORDS]


class BM25:
    """Okapi BM25 over a fixed list of texts.

    Written here with numpy rather than taken from a library: the baseline must be plain and
    exact (rank-bm25, the usual package, replaces negative IDFs by a share of the mean IDF),
    and no BM25 library is among the project's dependencies."""

    def __init__(self, texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        docs = [Counter(bm25_tokens(t)) for t in texts]
        self.n = len(docs)
        lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
        average = float(lengths.mean()) if self.n and lengths.mean() > 0 else 1.0
        self.k1 = k1
        self.norm = k1 * (1.0 - b + b * lengths / average)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, doc in enumerate(docs):
            for term, tf in doc.items():
                slots, freqs = postings.setdefault(term, ([], []))
                slots.append(i)
                freqs.append(tf)
        self.postings = {
            term: (np.array(slots), np.array(freqs, dtype=np.float64), self._idf(len(slots)))
            for term, (slots, freqs) in postings.items()
        }

    def _idf(self, df: int) -> float:
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        """The BM25 score of every text for ``query`` (query terms counted with repeats)."""
        out = np.zeros(self.n)
        for term in bm25_tokens(query):
            posting = self.postings.get(term)
            if posting is None:
                continue
            slots, tf, idf = posting
            out[slots] += idf * tf * (self.k1 + 1.0) / (tf + self.norm[slots])
        return out


class Dense:
    """Cosine with the full MiniLM model (no quick query vectors), vectors cached per text."""

    def __init__(self) -> None:
        from memtap_minilm import MiniLMEmbedder

        self.model = MiniLMEmbedder(quick_queries=False)
        self.cache: dict[str, np.ndarray[Any, Any]] = {}
        self.seconds = 0.0

    def vectors(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One unit-length row per text (each distinct text embedded once per process)."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            started = time.perf_counter()
            for text, row in zip(missing, self.model.embed(missing)):
                self.cache[text] = row
            self.seconds += time.perf_counter() - started
        if not texts:
            return np.zeros((0, 384), np.float32)
        return np.stack([self.cache[t] for t in texts])


def ranking(scores: np.ndarray[Any, Any], *, positive_only: bool = False) -> list[int]:
    """Unit positions best first (ties in unit order); with ``positive_only`` units scoring 0
    are left out."""
    order = np.argsort(-scores, kind="stable")
    if positive_only:
        order = order[scores[order] > 0]
    return [int(i) for i in order]


def auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """P(a positive's score > a negative's), ties counting a half (Mann-Whitney U / n1 n2)."""
    if not positive or not negative:
        return None
    p = np.asarray(positive)[:, None]
    n = np.asarray(negative)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


@contextlib.contextmanager
def clock_at(when: _dt.datetime) -> Iterator[None]:
    """Recall's clock reads ``when`` (a call's question is asked then; the injector has no
    ``now`` of its own)."""
    with mock.patch.object(recall_module, "utcnow", lambda: when):
        yield


def injected_fact_ids(
    mem: memtap.Memory, user: str, question: Question, n: int, *, model_wait: float | None = None
) -> tuple[bool, set[str]]:
    """Whether a call asking ``question`` gets a ``memory`` block, and the facts it carries:
    the injection hooks of ``mem``'s plugin manager, called as the tap calls them (with
    ``model_wait``: with the recall injector's budget waiting that long for the full model,
    however fast this loop asks: ``wait_under_load``, as a call on an idle machine)."""
    recall = mem.pm.get_plugin("recall")
    shipped = recall.budget
    if model_wait is not None:
        recall.budget = attrs.evolve(shipped, model_wait=model_wait, wait_under_load=True)
    try:
        return _injected(mem, user, question, n)
    finally:
        recall.budget = shipped


def _injected(mem: memtap.Memory, user: str, question: Question, n: int) -> tuple[bool, set[str]]:
    protocols = mem.wire_protocols()
    protocol = protocols.get("openai.chat") or next(iter(protocols.values()))
    request = InjectionRequest(
        attribution=Attribution(entity_id=user, session_id=f"memory-eval-{n}"),
        protocol=protocol,
        request=RequestView(messages=[Message("user", question.question)]),
    )
    with clock_at(question.asked_at):
        plan = merge_injections(mem.pm.hook.memtap_request_injections(request=request))
    blocks = [b for b in plan.system_blocks if b.slot == "memory"]
    return bool(blocks), {i for b in blocks for i in b.fact_ids if i}


def injector_candidates(
    mem: memtap.Memory, user: str, question: Question, gold: set[str], full_cosine: Callable[[str], float]
) -> list[dict[str, Any]]:
    """What the recall injector weighs for ``question``, best first: the search it makes
    (``RecallBudget``'s ``k * 2`` hits at its ``min_score``, the same deadline as above),
    each hit with its score parts, whether it is gold (its id in ``gold``), who said it, and
    the full model's cosine of its text alone with the question (``full_cosine``). For
    fitting an injection gate offline (``benchmarks/abstention_gate.py``)."""
    budget = RecallBudget()
    parts: dict[str, Any] = {}
    with clock_at(question.asked_at):
        hits = mem.longterm.engine.search(
            question.question,
            entity_id=user,
            k=budget.k * 2,
            min_score=budget.min_score,
            deadline=INJECTION_DEADLINE,
            parts=parts,
        )
    out = []
    for hit in hits or ():
        p = parts.get(hit.fact.id)
        out.append(
            {
                "text": hit.fact.text,
                "score": hit.score,
                "cosine": None if p is None else p.cosine,
                "bm25": None if p is None else p.bm25,
                "coverage": None if p is None else p.coverage,
                "full_cosine": full_cosine(hit.fact.text),
                "gold": hit.fact.id in gold,
                "role": hit.fact.metadata.get("role"),
                "kind": hit.fact.kind,
            }
        )
    return out


def _cosine_with(dense: Dense, qvec: np.ndarray[Any, Any], text: str) -> float:
    return float(dense.vectors([text])[0] @ qvec)


def _ranks(order: Sequence[int]) -> dict[int, int]:
    return {unit: rank for rank, unit in enumerate(order)}


def judge(
    order: Sequence[int], question: Question, turn_unit: dict[str, int], is_assistant: Sequence[bool]
) -> dict[str, Any]:
    """What one ranking gives one question: the rank of its best gold unit, of its worst
    evidence turn (``all``), whether the newest statement is above every stale one."""
    ranks = _ranks(order)
    last = math.inf
    evidence = [ranks.get(turn_unit[t], last) if t in turn_unit else last for t in question.evidence]
    stale = [ranks[turn_unit[t]] for t in question.stale if t in turn_unit and turn_unit[t] in ranks]
    best = min(evidence, default=last)
    worst = max(evidence, default=last)
    out: dict[str, Any] = {
        "rank": None if best == last else int(best),
        "all_rank": None if worst == last else int(worst),
        "top_assistant": bool(order) and is_assistant[order[0]],
        "assistant_top10": sum(is_assistant[i] for i in order[:10]),
        "slots_top10": len(order[:10]),
    }
    if question.kind == "update":
        out["newest_above_stale"] = best < min(stale, default=last)
    return out


def run_path(
    people: Sequence[Person],
    path: str,
    dense: Dense,
    *,
    label: dict[str, str],
    log: Callable[[str], None] = lambda _: None,
    candidates: bool = False,
    budget_changes: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Store ``people`` by ``path`` in a fresh Memory and ask every question: one record per
    question (see the module docstring), and the seconds spent storing and asking."""
    budget = attrs.evolve(RecallBudget(**(budget_changes or {})), deadline=INJECTION_DEADLINE)
    mem = memtap.Memory("memory://", spool=False, recall=budget)
    prepare = getattr(mem.longterm.engine.embedder, "prepare_quick_queries", None)
    if prepare is not None and mem.longterm.engine.embedder.quick_queries:  # type: ignore[union-attr]
        prepare()
    timing = {"store_s": 0.0, "ask_s": 0.0, "dense_embedding_s": -dense.seconds}
    records: list[dict[str, Any]] = []
    try:
        for person in people:
            started = time.perf_counter()
            if path == "capture":
                recall_sets.store_by_capture(mem, person)
                mem.flush(600)
            else:
                recall_sets.store_by_remember(mem, person)
            units: list[Fact] = mem.facts(entity_id=person.id)
            mem.recall("warm up", entity_id=person.id)  # load and embed every unit
            timing["store_s"] += time.perf_counter() - started
            started = time.perf_counter()
            records += ask(mem, person, units, dense, label={**label, "path": path}, candidates=candidates)
            timing["ask_s"] += time.perf_counter() - started
            log(f"  {label['set']}/{label['half']}/{path}: {person.id} ({len(units)} units)")
    finally:
        mem.close()
    timing["dense_embedding_s"] += dense.seconds  # part of ask_s: the baseline's vectors
    return records, timing


def ask(
    mem: memtap.Memory,
    person: Person,
    units: list[Fact],
    dense: Dense,
    *,
    label: dict[str, str],
    candidates: bool = False,
) -> list[dict[str, Any]]:
    """Every question of ``person`` put to memtap, the baselines and the injector."""
    by_text = recall_sets.ids_by_text(person.turns)
    turn_unit = {turn: i for i, u in enumerate(units) for turn in by_text.get(recall_sets.norm(u.text), ())}
    position = {u.id: i for i, u in enumerate(units)}
    is_assistant = [u.metadata.get("role") == "assistant" for u in units]
    texts = [u.text for u in units]
    unit_vectors = dense.vectors(texts)
    bm25 = BM25(texts)
    records = []
    for n, q in enumerate(person.questions):
        k = max(10, len(units)) if q.kind == "update" else 10
        # Injected first, as a call asking it for the first time would be (after recall,
        # the full model's vector of the question is in the query cache): at once (no wait
        # for the full model), then waiting for it as long as the deadline allows.
        at_once, at_once_ids = injected_fact_ids(mem, person.id, q, n, model_wait=0.0)
        injected, ids = injected_fact_ids(mem, person.id, q, n, model_wait=INJECTION_DEADLINE)
        found = mem.recall(q.question, entity_id=person.id, k=k, now=q.asked_at)
        cosines = unit_vectors @ dense.vectors([q.question])[0] if units else np.zeros(0)
        lexical = bm25.scores(q.question)
        orders = {
            "memtap": [position[s.fact.id] for s in found if s.fact.id in position],
            "dense": ranking(cosines),
            "bm25": ranking(lexical, positive_only=True),
        }
        tops = {
            "memtap": found[0].score if found else 0.0,
            "dense": float(cosines.max()) if units else 0.0,
            "bm25": float(lexical.max()) if units else 0.0,
        }
        gold = {turn_unit[t] for t in q.evidence if t in turn_unit}
        record: dict[str, Any] = {
            **label,
            "user": person.id,
            "id": q.id,
            "kind": q.kind,
            "question": q.question,
            "evidence": list(q.evidence),
            "stale": list(q.stale),
            "units": len(units),
            "evidence_without_unit": [t for t in q.evidence if t not in turn_unit],
            "injected": injected,
            "evidence_injected": any(units[i].id in ids for i in gold),
            "injected_units": len(ids),
            "injected_at_once": at_once,
            "evidence_injected_at_once": any(units[i].id in at_once_ids for i in gold),
        }
        if candidates:
            qvec = dense.vectors([q.question])[0]
            record["candidates"] = injector_candidates(
                mem,
                person.id,
                q,
                {units[i].id for i in gold},
                functools.partial(_cosine_with, dense, qvec),
            )
        for name, order in orders.items():
            record[name] = {
                **judge(order, q, turn_unit, is_assistant),
                "top_score": tops[name],
                "first": [texts[i][:120] for i in order[:3]],
            }
        records.append(record)
    return records


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every figure of one set, half and path (see the module docstring)."""
    answerable = [r for r in records if r["evidence"]]
    never = [r for r in records if r["kind"] == "abstention"]
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    per_kind: dict[str, Any] = {}
    for kind in [*kinds, "overall"]:
        rows = [r for r in answerable if kind == "overall" or r["kind"] == kind]
        if not rows:
            continue
        entry: dict[str, Any] = {"n": len(rows)}
        for name in RANKERS:
            ranks = [r[name]["rank"] for r in rows]
            entry[name] = {f"R@{k}": _share([x is not None and x < k for x in ranks]) for k in KS}
            entry[name]["all@10"] = _share(
                [r[name]["all_rank"] is not None and r[name]["all_rank"] < 10 for r in rows]
            )
            if kind == "update":
                entry[name]["newest_above_stale"] = _share([r[name]["newest_above_stale"] for r in rows])
        per_kind[kind] = entry
    misses = [r for r in answerable if r["memtap"]["rank"] is None or r["memtap"]["rank"] >= 10]
    slots = sum(r["memtap"]["slots_top10"] for r in records)
    evidence_turns = {(r["user"], t) for r in answerable for t in r["evidence"]}
    without = {(r["user"], t) for r in answerable for t in r["evidence_without_unit"]}
    return {
        "questions": len(records),
        # Questions of an answerable kind that name no evidence (LOCOMO has a few): left out.
        "without_evidence": sum(not r["evidence"] and r["kind"] != "abstention" for r in records),
        "per_kind": per_kind,
        "injection": {
            "abstention_questions": len(never),
            "false_injection": _share([r["injected"] for r in never]),
            "evidence_injected": _share([r["evidence_injected"] for r in answerable]),
            "false_injection_at_once": _share([r.get("injected_at_once", False) for r in never]),
            "evidence_injected_at_once": _share(
                [r.get("evidence_injected_at_once", False) for r in answerable]
            ),
            "auc": {
                name: auc([r[name]["top_score"] for r in answerable], [r[name]["top_score"] for r in never])
                for name in RANKERS
            },
        },
        "assistant": {
            "top10_share": sum(r["memtap"]["assistant_top10"] for r in records) / slots if slots else None,
            "top10_slots": slots,
            "misses": len(misses),
            "misses_topped_by_assistant": _share([r["memtap"]["top_assistant"] for r in misses]),
        },
        "evidence_turns": len(evidence_turns),
        "evidence_turns_without_unit": len(without),
    }


def load(name: str, half: str, args: argparse.Namespace) -> list[Person] | str:
    """The people of set ``name`` in ``half``, or why the set is skipped."""
    if name == "paraphrase":
        return recall_sets.paraphrase_people(half)
    if name == "locomo":
        if not Path(args.locomo).is_file():
            return f"LOCOMO not found at {args.locomo} (set --locomo)"
        return recall_sets.locomo_people(args.locomo, half)
    if name == "fresh":
        fresh = Path(args.fresh)
        if not any(fresh.glob("users_*.json")):
            return f"no users_*.json in {fresh} (set --fresh)"
        return recall_sets.longmem_people(fresh, half, held_out_only=True, filler_from=[LONGMEM_DIR])
    folder = Path(args.longmem)
    if not any(folder.glob("users_*.json")):
        return f"no users_*.json in {folder} (set --longmem)"
    return recall_sets.longmem_people(folder, half)


def parse_budget(spec: str) -> dict[str, Any]:
    """``--budget`` ("k:8,max_tokens:400,min_score:0.03"): the injector's budget changed
    from the shipped one, to try another on the tuning halves."""
    shipped = RecallBudget()
    out: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition(":")
        out[name] = type(getattr(shipped, name))(value)
    return out


def evaluate(args: argparse.Namespace, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every set, half and path asked for: their summaries (and the per-question records)."""
    sets: tuple[str, ...] = SETS if args.set == "all" else (args.set,)
    halves: tuple[str, ...] = HALVES if args.half == "all" else (args.half,)
    paths: tuple[str, ...] = PATHS if args.path == "all" else (args.path,)
    if args.quick:
        sets, halves = tuple(s for s in sets if s != "locomo"), ("tune",)
    dense = Dense()
    results = []
    for name in sets:
        for half in halves:
            people = load(name, half, args)
            if isinstance(people, str):
                log(f"{name}: skipped: {people}")
                continue
            if not people:
                log(f"{name}: no users in the {half} half")
                continue
            result: dict[str, Any] = {"set": name, "half": half, "users": len(people), "paths": {}}
            for path in paths:
                records, timing = run_path(
                    people,
                    path,
                    dense,
                    label={"set": name, "half": half},
                    log=log,
                    candidates=bool(args.per_question) and args.candidates,
                    budget_changes=parse_budget(args.budget),
                )
                result["paths"][path] = {**summarize(records), **timing, "records": records}
            results.append(result)
    return results


def _cell(value: float | None) -> str:
    return "   -  " if value is None else f"{value:6.3f}"


def report(result: dict[str, Any]) -> str:
    """The readable tables of one set and half."""
    paths = result["paths"]
    columns = [(p, name) for p in paths for name in RANKERS]
    heads = [f"{p if name == 'memtap' else name + '(' + p[0] + ')'}" for p, name in columns]
    kinds = list(dict.fromkeys(k for p in paths.values() for k in p["per_kind"]))
    out = [f"== {result['set']} / {result['half']} ({result['users']} users) =="]
    out.append("R@10 " + " " * 10 + "    n " + " ".join(f"{h:>11}" for h in heads))
    for kind in kinds:
        entry = [paths[p]["per_kind"].get(kind) for p, _ in columns]
        n = next((e["n"] for e in entry if e), 0)
        cells = [_cell(e[name]["R@10"] if e else None) for e, (_, name) in zip(entry, columns)]
        out.append(f"{kind:15} {n:5d} " + " ".join(f"{c:>11}" for c in cells))
    out.append("R@1 / R@5" + " " * 12 + " ".join(f"{h:>11}" for h in heads))
    for kind in kinds:
        entry = [paths[p]["per_kind"].get(kind) for p, _ in columns]
        cells = [
            f"{e[name]['R@1']:.2f}/{e[name]['R@5']:.2f}" if e else "-" for e, (_, name) in zip(entry, columns)
        ]
        out.append(f"{kind:20} " + " ".join(f"{c:>11}" for c in cells))
    for p, figures in paths.items():
        per = figures["per_kind"]
        line = [f"[{p}]"]
        for kind in ("multi", "multi-hop"):
            if kind in per:
                line.append("all@10 " + " ".join(f"{n} {per[kind][n]['all@10']:.3f}" for n in RANKERS))
        if "update" in per:
            line.append(
                "newest above stale "
                + " ".join(f"{n} {per['update'][n]['newest_above_stale']:.3f}" for n in RANKERS)
            )
        inj = figures["injection"]
        aucs = " ".join(f"{n} {v:.3f}" for n, v in inj["auc"].items() if v is not None)
        line.append(
            f"injection: false {_cell(inj['false_injection']).strip()} "
            f"of {inj['abstention_questions']} abstention, "
            f"evidence injected {_cell(inj['evidence_injected']).strip()}" + (f", AUC {aucs}" if aucs else "")
        )
        if inj.get("evidence_injected_at_once") is not None:
            line.append(
                f"injection without waiting for the full model (model_wait=0): false "
                f"{_cell(inj['false_injection_at_once']).strip()}, evidence injected "
                f"{_cell(inj['evidence_injected_at_once']).strip()}"
            )
        if p == "capture":
            a = figures["assistant"]
            line.append(
                f"assistant share of top 10 {_cell(a['top10_share']).strip()} ({a['top10_slots']} slots), "
                "misses topped by the assistant "
                f"{_cell(a['misses_topped_by_assistant']).strip()} of {a['misses']}"
            )
        line.append(
            f"evidence turns without a unit {figures['evidence_turns_without_unit']} "
            f"of {figures['evidence_turns']}; "
            f"store {figures['store_s']:.0f} s, ask {figures['ask_s']:.0f} s "
            f"(embedding for dense {figures['dense_embedding_s']:.0f} s)"
        )
        out.append("\n    ".join(line))
    return "\n".join(out)


def options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's options (``argv``, default ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--set", choices=["all", *SETS], default="all")
    parser.add_argument("--half", choices=["all", *HALVES], default="tune")
    parser.add_argument("--path", choices=["all", *PATHS], default="all")
    parser.add_argument("--longmem", default=str(LONGMEM_DIR), help="folder of users_*.json / filler_*.json")
    parser.add_argument("--locomo", default=recall_sets.LOCOMO_DATA)
    parser.add_argument(
        "--fresh",
        default=str(FRESH_DIR),
        help="folder of --set fresh's held-out users_*.json (benchmarks/longmem_fresh2: the next)",
    )
    parser.add_argument("--quick", action="store_true", help="tuning halves of paraphrase and longmem only")
    parser.add_argument(
        "--budget",
        default="",
        metavar="NAME:VALUE,...",
        help="the injector's RecallBudget changed from the shipped one (tuning halves only)",
    )
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    parser.add_argument("--per-question", metavar="FILE", help="write one JSON line per question and path")
    parser.add_argument(
        "--candidates",
        action="store_true",
        help="with --per-question: each record carries the injector's candidates (abstention_gate.py)",
    )
    parser.add_argument("--markdown", action="store_true", help="the tables as docs/benchmarks.md shows them")
    parser.add_argument("--from-json", metavar="FILE", help="print the tables of a saved --json output")
    return parser.parse_args(argv)


def markdown(results: Sequence[dict[str, Any]]) -> str:
    """The halves of one set as docs/benchmarks.md shows them: R@10 per kind for memtap's
    paths and the two baselines (on the first path's units), halves side by side, overall
    R@1 and R@5 under them; then the update, injection and assistant figures per half."""
    halves = [(r, r["paths"]) for r in results]
    columns = []
    for r, paths in halves:
        base = next(iter(paths))
        columns += [(r["half"], p, "memtap") for p in paths]
        columns += [(r["half"], base, name) for name in ("dense", "bm25")]
    figures = {(r["half"], p): f for r, paths in halves for p, f in paths.items()}
    names = {"dense": "dense", "bm25": "BM25"}
    heads = [f"{h} {p if name == 'memtap' else names[name]}" for h, p, name in columns]
    users = ", ".join(f"{r['half']} {r['users']} users" for r in results)
    out = [
        f"{results[0]['set']} ({users}), R@10; dense and BM25 rank the {columns[0][1]} path's units",
        "",
        "| kind | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    kinds = list(dict.fromkeys(k for f in figures.values() for k in f["per_kind"]))
    for kind in kinds:
        cells = []
        for half, p, name in columns:
            entry = figures[half, p]["per_kind"].get(kind)
            cells.append(f"{entry[name]['R@10']:.3f}" if entry else "-")
        n = "/".join(
            str(figures[half, p]["per_kind"][kind]["n"])
            for half, p, name in columns
            if name == "memtap" and p == columns[0][1] and kind in figures[half, p]["per_kind"]
        )
        label = f"**{kind}** ({n})" if kind == "overall" else f"{kind} ({n})"
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    for k in ("R@1", "R@5"):
        cells = [f"{figures[h, p]['per_kind']['overall'][name][k]:.3f}" for h, p, name in columns]
        out.append(f"| overall {k} | " + " | ".join(cells) + " |")
    out.append("")
    for (half, p), f in figures.items():
        per, inj, notes = f["per_kind"], f["injection"], []
        if "update" in per:
            notes.append(
                "newest above stale "
                + ", ".join(f"{n} {per['update'][n]['newest_above_stale']:.2f}" for n in RANKERS)
            )
        for kind in ("multi", "multi-hop"):
            if kind in per:
                notes.append("all@10 " + ", ".join(f"{n} {per[kind][n]['all@10']:.2f}" for n in RANKERS))
        if inj["abstention_questions"]:
            notes.append(f"false injection {inj['false_injection']:.2f} of {inj['abstention_questions']}")
        notes.append(f"evidence injected {inj['evidence_injected']:.2f}")
        if inj.get("evidence_injected_at_once") is not None:
            at_once = f"evidence injected {inj['evidence_injected_at_once']:.2f}"
            if inj["abstention_questions"]:
                at_once = f"false injection {inj['false_injection_at_once']:.2f}, " + at_once
            notes.append("without waiting for the full model: " + at_once)
        aucs = ", ".join(f"{n} {v:.2f}" for n, v in inj["auc"].items() if v is not None and n != "bm25")
        if aucs:
            notes.append(f"AUC {aucs}")
        if p == "capture" and f["assistant"]["top10_share"] is not None:
            a = f["assistant"]
            notes.append(
                f"assistant turns {a['top10_share']:.2f} of top-10 slots and first in "
                f"{_cell(a['misses_topped_by_assistant']).strip()} of {a['misses']} misses"
            )
        if f["evidence_turns_without_unit"]:
            notes.append(f"{f['evidence_turns_without_unit']} evidence turns without a unit")
        out.append(f"- {half}, {p}: " + "; ".join(notes))
    return "\n".join(out)


def tables(results: Sequence[dict[str, Any]], as_markdown: bool = False) -> str:
    """The readable tables of ``results``: per set and half, or per set as Markdown."""
    if not as_markdown:
        return "\n\n".join(report(r) for r in results)
    sets = dict.fromkeys(r["set"] for r in results)
    return "\n\n".join(markdown([r for r in results if r["set"] == name]) for name in sets)


def main(argv: Sequence[str] | None = None) -> None:
    args = options(argv)
    if args.from_json:
        print(tables(json.loads(Path(args.from_json).read_text())["results"], args.markdown))
        return
    started = time.perf_counter()
    results = evaluate(args, log=lambda line: print(line, file=sys.stderr))
    if args.per_question:
        with open(args.per_question, "w") as out:
            for result in results:
                if result["half"] == "heldout" and args.half != "heldout":
                    continue
                for figures in result["paths"].values():
                    for record in figures["records"]:
                        out.write(json.dumps(record) + "\n")
    for result in results:
        for figures in result["paths"].values():
            del figures["records"]
    if args.json:
        json.dump({"results": results, "total_s": time.perf_counter() - started}, sys.stdout, indent=1)
        print()
        return
    print(tables(results, args.markdown) + "\n")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
