"""benchmarks/memory_eval.py: the baselines and metrics on hand-computed cases, the halves
and filler placement of the LongMemEval-shaped set, and a whole evaluation of a tiny set of
that format (``longmem_tiny/``) with the default distribution: the units each path stores,
the baselines on them, and injection measured through the Memory's injection hooks."""

from __future__ import annotations

import datetime as _dt
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

import memtap
import memtap.longterm.recall as recall_module
from memtap import hookimpl

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import memory_eval  # noqa: E402  (a script folder, not a package)
import recall_sets  # noqa: E402

TINY = Path(__file__).parent / "longmem_tiny"
UTC = _dt.timezone.utc


def test_bm25_is_okapi_by_hand():
    texts = ["The beagle is named Biscuit", "a cat named Miso", "Beagle, beagle!"]
    # Tokens without stop words: [beagle, named, biscuit], [cat, named, miso], [beagle, beagle].
    bm25 = memory_eval.BM25(texts)
    lengths, average = [3, 3, 2], 8 / 3
    idf_beagle = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_miso = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))

    def part(tf: int, length: int, idf: float) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))

    scores = bm25.scores("Is the beagle Miso's?")  # stop words "is", "the" out; "s" is one too
    assert scores == pytest.approx(
        [part(1, lengths[0], idf_beagle), part(1, lengths[1], idf_miso), part(2, lengths[2], idf_beagle)]
    )
    assert memory_eval.ranking(bm25.scores("a cat"), positive_only=True) == [1]
    assert memory_eval.ranking(bm25.scores("the"), positive_only=True) == []


def test_metrics_by_hand():
    assert memory_eval.auc([0.9, 0.5], [0.5, 0.1]) == pytest.approx(3.5 / 4)
    assert memory_eval.auc([0.9], []) is None
    question = recall_sets.Question(
        "q", "update", "?", _dt.datetime(2024, 1, 1, tzinfo=UTC), ("new",), ("old",)
    )
    turn_unit = {"new": 1, "old": 0, "other": 2}
    assistant = [False, False, True]
    judged = memory_eval.judge([2, 0, 1], question, turn_unit, assistant)
    assert judged["rank"] == 2 and judged["newest_above_stale"] is False and judged["top_assistant"] is True
    assert memory_eval.judge([1, 2], question, turn_unit, assistant)["newest_above_stale"] is True
    # Absent ranks last: neither ranked is no; the stale one alone ranked is no.
    assert memory_eval.judge([2], question, turn_unit, assistant)["newest_above_stale"] is False
    multi = recall_sets.Question("m", "multi", "?", question.asked_at, ("new", "old", "unstored"))
    judged = memory_eval.judge([0, 1], multi, turn_unit, assistant)
    assert judged["rank"] == 0 and judged["all_rank"] is None  # an evidence turn without a unit


def test_halves_and_filler_are_decided_by_the_user_id():
    # sha256("t01") starts with 4 (even: tune), sha256("t03") with 7 (held out).
    assert [p.id for p in recall_sets.longmem_people(TINY, "tune")] == ["t01"]
    assert [p.id for p in recall_sets.longmem_people(TINY, "heldout")] == ["t03"]
    (first,) = recall_sets.longmem_people(TINY, "tune")
    (again,) = recall_sets.longmem_people(TINY, "tune")
    filler = [t for t in first.turns if t.session == "t01-ft-01"]
    assert [t.id for t in filler] == ["t01-ft-01-1", "t01-ft-01-2"]
    assert filler == [t for t in again.turns if t.session == "t01-ft-01"]
    start = _dt.datetime(2024, 1, 10, 18, tzinfo=UTC) - _dt.timedelta(days=30)
    assert start <= filler[0].at <= _dt.datetime(2024, 6, 1, 8, tzinfo=UTC)
    assert [t.at for t in first.turns] == sorted(t.at for t in first.turns)


def test_a_question_naming_a_turn_its_user_lacks_is_a_clear_error(tmp_path: Path):
    data = json.loads((TINY / "users_t.json").read_text())
    data["users"][0]["questions"][0]["evidence"] = ["t01-s9-1"]
    (tmp_path / "users_x.json").write_text(json.dumps(data))
    (tmp_path / "filler_t.json").write_text((TINY / "filler_t.json").read_text())
    with pytest.raises(recall_sets.LongmemFormatError, match=r"t01-q1 names turns \['t01-s9-1'\]"):
        recall_sets.longmem_people(tmp_path)


@pytest.fixture(scope="module")
def tiny() -> dict[tuple[str, str], dict[str, Any]]:
    args = memory_eval.options(["--set", "longmem", "--half", "tune", "--longmem", str(TINY)])
    results = memory_eval.evaluate(args, log=lambda _: None)
    return {(r["half"], path): figures for r in results for path, figures in r["paths"].items()}


def test_each_path_is_judged_on_its_own_units(tiny):
    capture, remember = tiny["tune", "capture"], tiny["tune", "remember"]
    # A question turn is no episode: "Do you know a good vet for puppies?" has no unit when
    # captured, so its question is a miss for every ranker there; remembered, it is a unit.
    assert (capture["evidence_turns"], capture["evidence_turns_without_unit"]) == (3, 1)
    assert (remember["evidence_turns"], remember["evidence_turns_without_unit"]) == (3, 0)
    # Fewer than 10 units: dense ranks every unit, so R@10 is the share with a unit.
    assert capture["per_kind"]["single"]["dense"]["R@10"] == 0.5
    assert remember["per_kind"]["single"]["dense"]["R@10"] == 1.0
    # BM25: "name" / "beagle" -- only "I adopted a beagle named Biscuit." has one ("named" is
    # another word without stemming): first. "work" is in the stale teacher turn (and in the
    # assistant's "rewarding work"), never in the surveyor one: the newest is absent.
    assert capture["per_kind"]["single"]["bm25"]["R@1"] == 0.5
    assert capture["per_kind"]["update"]["bm25"]["newest_above_stale"] == 0.0
    assert capture["per_kind"]["update"]["dense"]["R@10"] == 1.0
    records = {r["id"]: r for r in capture["records"]}
    assert records["t01-q1"]["bm25"]["first"] == ["I adopted a beagle named Biscuit."]
    assert records["t01-q3"]["evidence_without_unit"] == ["t01-s2-3"]


def test_the_tables_show_every_kind(tiny):
    result = {"set": "longmem", "half": "tune", "users": 1}
    result["paths"] = {p: tiny["tune", p] for p in ("capture", "remember")}
    table = memory_eval.markdown([result])
    # Columns: capture, remember, then dense and BM25 on the capture path's units.
    assert "| single (2) | 0.500 | 1.000 | 0.500 | 0.500 |" in table
    assert "| **overall** (3) |" in table and "false injection" in table
    text = memory_eval.report(result)
    assert text.splitlines()[2].split()[:2] == ["single", "2"]


def test_injection_figures_come_from_the_records(tiny):
    for figures in (tiny["tune", "capture"], tiny["tune", "remember"]):
        records = {r["id"]: r for r in figures["records"]}
        injection = figures["injection"]
        assert injection["abstention_questions"] == 1
        assert injection["false_injection"] == float(records["t01-q4"]["injected"])
        answerable = [r for r in records.values() if r["evidence"]]
        assert injection["evidence_injected"] == sum(r["evidence_injected"] for r in answerable) / 3
        # "What is the name of my beagle?" finds its fact well above the threshold.
        assert records["t01-q1"]["evidence_injected"] is True


class DropMemoryBlocks:
    """A gate added to injection by another plugin: no ``memory`` block ever."""

    @hookimpl(wrapper=True)
    def memtap_request_injections(self, request: Any) -> Any:
        contributions = yield
        return [[b for b in c or () if getattr(b, "slot", None) != "memory"] for c in contributions]


@pytest.mark.parametrize("gate", [False, True])
def test_injection_is_measured_through_the_injection_hooks(gate: bool):
    mem = memtap.Memory("memory://", spool=False, plugins=[DropMemoryBlocks()] if gate else [])
    try:
        fact = mem.remember("I adopted a beagle named Biscuit.", entity_id="u")
        mem.recall("warm up", entity_id="u")
        question = recall_sets.Question(
            "q", "single", "What is the name of my beagle?", _dt.datetime(2024, 6, 1, tzinfo=UTC), ("t",)
        )
        injected, ids = memory_eval.injected_fact_ids(mem, "u", question, 0)
    finally:
        mem.close()
    assert (injected, ids) == ((False, set()) if gate else (True, {fact.id}))


def test_the_question_is_asked_at_its_time():
    seen = []
    with memory_eval.clock_at(_dt.datetime(2024, 6, 1, tzinfo=UTC)):
        seen.append(recall_module.utcnow())
    assert seen == [_dt.datetime(2024, 6, 1, tzinfo=UTC)]
    assert recall_module.utcnow().year >= 2025


def test_fresh_reads_the_folder_given(tmp_path):
    import argparse

    said = memory_eval.load("fresh", "heldout", argparse.Namespace(fresh=str(tmp_path)))
    assert said == f"no users_*.json in {tmp_path} (set --fresh)"
    default = memory_eval.load("fresh", "heldout", argparse.Namespace(fresh=str(memory_eval.FRESH_DIR)))
    assert not isinstance(default, str) and {p.id[0] for p in default} == {"e", "f"}
