"""Choose :class:`memtap.longterm.index.Fusion`'s ranking knobs on the TUNING halves only.

Stores LOCOMO's tuning conversations (0-4) through the ``capture`` and ``remember`` paths
and the paraphrase set (answers and traps), once; then, for each setting of the grid,
swaps the fusion in the loaded indexes and asks the tuning questions again: LOCOMO's R@10
per path, the paraphrase set's even positions (R@1/5/10). Held-out halves are never read.

    python benchmarks/fusion_grid.py [--embedder default|minilm-full] [--stage NAME]
    python benchmarks/fusion_grid.py --try "" --try "present_words:0,meaning_slots:2"
        (the shipped defaults, then the defaults with those knobs changed)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import attrs

import memtap
from memtap.longterm.index import Fusion
from memtap.testing import paraphrases

sys.path.insert(0, str(Path(__file__).parent))
import locomo_recall
import recall_sets

TUNE_CONVERSATIONS = range(5)
T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)


def _prepared(embedder: str) -> memtap.Memory:
    mem = memtap.Memory("memory://", embedder=embedder, spool=False)
    prepare = getattr(mem.longterm.engine.embedder, "prepare_quick_queries", None)
    if prepare is not None and mem.longterm.engine.embedder.quick_queries:  # type: ignore[union-attr]
        prepare()
    return mem


def _use(mem: memtap.Memory, fusion: Fusion) -> None:
    indexes = mem.longterm.engine.indexes
    indexes.fusion = fusion
    for entry in indexes._entries.values():
        with entry.lock:
            if entry.index is not None:
                entry.index.fusion = fusion
            entry.memo.clear()


class Locomo:
    """LOCOMO's tuning conversations, stored by one path."""

    def __init__(self, path: str, embedder: str) -> None:
        data = json.loads(Path(locomo_recall.DEFAULT_DATA).read_text())
        self.samples = [data[i] for i in TUNE_CONVERSATIONS]
        self.mem = _prepared(embedder)
        self.dia: dict[str, set[str]] = {}
        for sample in self.samples:
            if path == "capture":
                by_text = locomo_recall.store_by_capture(self.mem, sample)
            else:
                by_text = locomo_recall.store_by_remember(self.mem, sample, 2)
            for f in self.mem.facts(entity_id=sample["sample_id"]):
                self.dia[f.id] = by_text.get(recall_sets.norm(f.text), set())
            self.mem.recall("warm up", entity_id=sample["sample_id"])

    def score(self, fusion: Fusion) -> dict[str, float]:
        _use(self.mem, fusion)
        per: dict[str, list[bool]] = {}
        first: list[bool] = []
        for sample in self.samples:
            now = recall_sets.locomo_asked_at(sample["conversation"])
            for qa in sample["qa"]:
                name = locomo_recall.CATEGORIES.get(qa["category"])
                if name is None:
                    continue
                found = self.mem.recall(qa["question"], entity_id=sample["sample_id"], k=10, now=now)
                evidence = set(qa["evidence"])
                per.setdefault(name, []).append(any(evidence & self.dia[s.fact.id] for s in found))
                first.append(bool(found) and bool(evidence & self.dia[found[0].fact.id]))
        out = {name: statistics.fmean(v) for name, v in per.items()}
        out["overall"] = statistics.fmean([x for v in per.values() for x in v])
        out["R@1"] = statistics.fmean(first)
        return out


class Paraphrases:
    """The paraphrase set (answers and traps), its even positions asked."""

    def __init__(self, embedder: str) -> None:
        self.mem = _prepared(embedder)
        for i, text in enumerate(paraphrases.facts()):
            self.mem.remember(text, entity_id="user", at=T0 + _dt.timedelta(minutes=i))
        self.mem.recall("warm up", entity_id="user")
        self.questions = paraphrases.questions()[::2]

    def score(self, fusion: Fusion) -> dict[str, float]:
        _use(self.mem, fusion)
        ranks = []
        for question, answer in self.questions:
            found = [s.text for s in self.mem.recall(question, entity_id="user", k=10)]
            ranks.append(found.index(answer) if answer in found else 99)
        return {f"R@{k}": statistics.fmean(r < k for r in ranks) for k in (1, 5, 10)}


class LongMem:
    """``benchmarks/longmem``'s users of one half (``--longmem-half``), stored by one path;
    R@10 per kind beside dense cosine's (the full MiniLM model) on the same units."""

    def __init__(self, path: str, embedder: str, half: str) -> None:
        import memory_eval

        self.mem = _prepared(embedder)
        self.people = recall_sets.longmem_people(Path(__file__).parent / "longmem", half)
        self.gold: dict[str, set[str]] = {}
        dense = memory_eval.Dense()
        self.dense: dict[str, list[bool]] = {}
        for person in self.people:
            store = recall_sets.store_by_capture if path == "capture" else recall_sets.store_by_remember
            store(self.mem, person)
            self.mem.flush()
            by_text = recall_sets.ids_by_text(person.turns)
            units = self.mem.facts(entity_id=person.id)
            for u in units:
                self.gold[u.id] = by_text.get(recall_sets.norm(u.text), set())
            vectors = dense.vectors([u.text for u in units])
            for q in person.questions:
                if not q.evidence:
                    continue
                cos = vectors @ dense.vectors([q.question])[0]
                top = [units[i] for i in sorted(range(len(units)), key=lambda i: -cos[i])[:10]]
                hit = any(set(q.evidence) & self.gold[u.id] for u in top)
                self.dense.setdefault(q.kind, []).append(hit)

    def score(self, fusion: Fusion) -> dict[str, Any]:
        _use(self.mem, fusion)
        per: dict[str, list[bool]] = {}
        newest: list[bool] = []
        for person in self.people:
            for q in person.questions:
                if not q.evidence:
                    continue
                k = 10_000 if q.kind == "update" else 10
                found = self.mem.recall(q.question, entity_id=person.id, k=k, now=q.asked_at)
                ranks = [set(q.evidence) & self.gold[s.fact.id] for s in found]
                per.setdefault(q.kind, []).append(any(ranks[:10]))
                if q.kind == "update":
                    stale = [i for i, s in enumerate(found) if set(q.stale) & self.gold[s.fact.id]]
                    gold = next((i for i, hit in enumerate(ranks) if hit), None)
                    newest.append(gold is not None and gold < min(stale, default=10_000))
        out: dict[str, Any] = {"newest above stale": f"{sum(newest)}/{len(newest)}"}
        for kind in [*per, "overall"]:
            mine = [x for k, v in per.items() if kind in (k, "overall") for x in v]
            base = [x for k, v in self.dense.items() if kind in (k, "overall") for x in v]
            out[kind] = f"{sum(mine)}/{sum(base)}/{len(mine)}"
        return out


def changed(spec: str) -> Fusion:
    """The default fusion with the knobs of ``spec`` ("name:value,name:value") changed."""
    base = Fusion()
    knobs: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition(":")
        knobs[name] = type(getattr(base, name))(value)
    return attrs.evolve(base, **knobs)


def grid(stage: str) -> list[Fusion]:
    base = Fusion()
    if stage == "words":
        return [
            attrs.evolve(base, lexical_weight=lw, coverage_power=p)
            for lw in (0.65, 0.5, 0.35)
            for p in (0.0, 0.5, 1.0, 2.0)
        ]
    if stage == "floor":
        return [
            attrs.evolve(base, lexical_weight=lw, coverage_power=p, meaning_floor=m)
            for lw, p in ((0.65, 0.5), (0.65, 1.0), (0.5, 0.5))
            for m in (0.5, 0.6, 0.7, 0.8)
        ]
    if stage == "full":
        return [
            attrs.evolve(base, lexical_weight=lw, coverage_power=p, coverage_full=c)
            for lw in (0.65, 0.5)
            for p in (1.0, 2.0)
            for c in (0.4, 0.6)
        ] + [
            attrs.evolve(base, lexical_weight=0.0, time_weight=0.0, recency_weight=0.0),
            attrs.evolve(base, lexical_weight=1.0),
        ]
    if stage == "roles":
        chosen = attrs.evolve(base, lexical_weight=0.5, coverage_power=1.0)
        return [
            attrs.evolve(chosen, assistant_factor=a, present_boost=r)
            for a in (1.0, 0.85, 0.7)
            for r in (0.01, 0.1)
        ]
    if stage == "floor0":
        chosen = attrs.evolve(base, lexical_weight=0.5, coverage_power=1.0)
        return [
            attrs.evolve(chosen, cos_floor=c, lexical_weight=lw) for c in (0.1, 0.0) for lw in (0.5, 0.65)
        ] + [
            attrs.evolve(
                chosen,
                cos_floor=0.0,
                user_first_margin=0.1,
                assistant_factor=a,
                present_boost=0.2,
                update_similarity=0.5,
                update_margin=0.1,
            )
            for a in (1.0, 0.85)
        ]
    if stage == "final":
        chosen = attrs.evolve(base, lexical_weight=0.5, coverage_power=1.0, cos_floor=0.1, present_boost=0.6)
        return [
            attrs.evolve(chosen, assistant_factor=a, user_first_margin=u)
            for a, u in ((0.85, 0.1), (1.0, 0.1), (0.85, 0.0))
        ]
    if stage == "echo":
        return [base, attrs.evolve(base, user_first_margin=0.0)]
    if stage == "echo_similarity":
        return [attrs.evolve(base, echo_similarity=e) for e in (-1.0, 0.3, 0.4, 0.5, 0.6, 0.7, 2.0)]
    raise SystemExit(f"unknown stage {stage}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--embedder", default="default")
    parser.add_argument("--stage", default="words")
    parser.add_argument(
        "--sets",
        default="capture,remember,paraphrase",
        help="of capture, remember (LOCOMO), paraphrase, longmem-capture, longmem-remember",
    )
    parser.add_argument("--longmem-half", default="tune")
    parser.add_argument(
        "--try",
        dest="tries",
        action="append",
        default=[],
        help="knob:value,... changed from the defaults (repeatable; instead of --stage)",
    )
    args = parser.parse_args()
    sets: dict[str, Any] = {}
    for name in args.sets.split(","):
        if name == "paraphrase":
            sets[name] = Paraphrases(args.embedder)
        elif name.startswith("longmem-"):
            sets[name] = LongMem(name.removeprefix("longmem-"), args.embedder, args.longmem_half)
        else:
            sets[name] = Locomo(name, args.embedder)
    for fusion in [changed(spec) for spec in args.tries] or grid(args.stage):
        knobs = {
            k: v
            for k, v in attrs.asdict(fusion).items()
            if v != getattr(Fusion(), k) or k == "lexical_weight"
        }
        row = {name: s.score(fusion) for name, s in sets.items()}
        print(json.dumps({"fusion": knobs, **row}), flush=True)


if __name__ == "__main__":
    main()
