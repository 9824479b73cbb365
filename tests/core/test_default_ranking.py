"""The shipped ranking weights, through the public API with nothing configured.

Each test sets up facts that match a question equally well but for the one thing a shipped
weight decides (how new a fact is, the time a question names, a question about now, how
rare a shared word is), so that setting that weight to 0 (or IDF to a constant) reorders
the answer. ``Fusion``'s own tests choose their weights; these guard the defaults a user
gets from ``memtap.Memory()``.
"""

from __future__ import annotations

import datetime as dt

import pytest

import memtap

NOW = dt.datetime(2026, 3, 18, 12, 0, tzinfo=dt.timezone.utc)
DAY = dt.timedelta(days=1)


def ranked(mem: memtap.Memory, question: str, *, k: int = 5) -> list[str]:
    return [hit.fact.text for hit in mem.recall(question, entity_id="alice", k=k, now=NOW)]


@pytest.mark.parametrize("newer_first", [False, True], ids=["older-stored-first", "newer-stored-first"])
def test_of_two_equal_matches_the_newer_ranks_first(mem: memtap.Memory, newer_first: bool) -> None:
    """Recency breaks a tie, whichever of the two was stored first."""
    older = ("Alice plays the cello in an orchestra", NOW - 300 * DAY)
    newer = ("Alice plays the violin in an orchestra", NOW - 2 * DAY)
    for text, at in (newer, older) if newer_first else (older, newer):
        mem.remember(text, entity_id="alice", at=at)
    assert ranked(mem, "which instrument does Alice play in an orchestra?") == [newer[0], older[0]]


def test_a_question_naming_a_day_ranks_that_days_fact_first(mem: memtap.Memory) -> None:
    """'yesterday' picks yesterday's fact over an equally matching newer one (the time
    weight), though recency alone would put the newer first."""
    mem.remember("Alice cooked ramen for dinner", entity_id="alice", at=NOW - DAY)
    mem.remember("Alice cooked risotto for dinner", entity_id="alice", at=NOW - dt.timedelta(hours=1))
    assert ranked(mem, "what did Alice cook for dinner yesterday?")[0] == "Alice cooked ramen for dinner"
    # The same question without a time: the newer first (recency), so the day decided above.
    assert ranked(mem, "what did Alice cook for dinner?")[0] == "Alice cooked risotto for dinner"


def test_a_question_about_now_ranks_the_newer_of_two_close_matches_first(mem: memtap.Memory) -> None:
    """The present-tense boost: a newer fact that matches a little less well wins when the
    question asks how things are now, not otherwise."""
    old = "Alice lives in a small flat in Lyon near the river Rhone"
    new = "Alice lives in Berlin these days with her sister"
    mem.remember(old, entity_id="alice", at=NOW - 400 * DAY)
    mem.remember(new, entity_id="alice", at=NOW - 3 * DAY)
    mem.remember("Bob the neighbour lives upstairs", entity_id="alice", at=NOW - 200 * DAY)
    assert ranked(mem, "where does Alice live in a flat near the river?")[0] == old
    assert ranked(mem, "where does Alice live in a flat near the river now?")[0] == new


def test_a_rare_shared_word_outweighs_a_common_one(mem: memtap.Memory) -> None:
    """IDF: of two facts sharing one word each with the question, the one sharing the word
    few facts use ranks first, though it is the longer fact (BM25 favours the shorter)."""
    for day in range(30):
        mem.remember(f"Alice noted the weather on day {day}", entity_id="alice", at=NOW - (40 + day) * DAY)
    common = "Alice noted the weather"
    rare = "Alice finally bought the secondhand bassoon she had wanted for years at the market"
    mem.remember(common, entity_id="alice", at=NOW - 5 * DAY)
    mem.remember(rare, entity_id="alice", at=NOW - 6 * DAY)
    hits = ranked(mem, "bassoon weather", k=40)
    assert hits[0] == rare
    assert hits.index(rare) < hits.index(common)
