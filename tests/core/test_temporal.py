"""Time in recall (issue 17, item 3): time expressions in questions and facts as windows
(:mod:`memtap.longterm.temporal`), facts of the time a question names ranked first, and the dates a
fact's relative words meant shown in the injected block."""

from __future__ import annotations

import datetime as _dt

import pytest

import memtap
from memtap.longterm.index import EntityIndex
from memtap.longterm.recall_injector import fact_line
from memtap.longterm.temporal import mentioned_window, query_window, resolved_note
from memtap.protocol.model import Fact
from memtap.storage.store import InMemoryStore

UTC = _dt.timezone.utc
#: Wednesday 10 May 2023, 15:00 UTC: "now" in these tests.
NOW = _dt.datetime(2023, 5, 10, 15, 0, tzinfo=UTC)


def may(day: int, hour: int = 12) -> _dt.datetime:
    return _dt.datetime(2023, 5, day, hour, tzinfo=UTC)


def days(window) -> tuple[str, str] | None:
    """A window as its first and last day (ISO), or ``None``."""
    if window is None:
        return None
    return window.start.date().isoformat(), (window.end - _dt.timedelta(days=1)).date().isoformat()


# -- the expressions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "first", "last"),
    [
        ("what did I eat today?", "2023-05-10", "2023-05-10"),
        ("what did I say this morning", "2023-05-10", "2023-05-10"),
        ("what did I eat yesterday?", "2023-05-09", "2023-05-09"),
        ("who called last night", "2023-05-09", "2023-05-09"),
        ("what happened the day before yesterday", "2023-05-08", "2023-05-08"),
        ("what's on tomorrow", "2023-05-11", "2023-05-11"),
        ("what did we do 3 days ago", "2023-05-07", "2023-05-07"),
        ("what did we do three days ago", "2023-05-07", "2023-05-07"),
        ("what did we do a few days ago", "2023-05-06", "2023-05-08"),
        ("what did we do a couple of days ago", "2023-05-08", "2023-05-08"),
        ("what did I do last week", "2023-05-01", "2023-05-07"),  # Monday to Sunday
        ("what did I do this week", "2023-05-08", "2023-05-14"),
        ("plans for next week", "2023-05-15", "2023-05-21"),
        ("what did I do two weeks ago", "2023-04-24", "2023-04-30"),
        ("where were we last weekend", "2023-05-06", "2023-05-07"),
        ("plans this weekend", "2023-05-13", "2023-05-14"),
        ("what did I do on Monday", "2023-05-08", "2023-05-08"),
        ("what did I do last Friday", "2023-05-05", "2023-05-05"),
        ("what did I do on Wednesday", "2023-05-03", "2023-05-03"),  # today is Wednesday: a week ago
        ("dentist next Tuesday", "2023-05-16", "2023-05-16"),
        ("what did I buy last month", "2023-04-01", "2023-04-30"),
        ("what did I buy this month", "2023-05-01", "2023-05-31"),
        ("what did I buy 3 months ago", "2023-02-01", "2023-02-28"),
        ("where did we go last year", "2022-01-01", "2022-12-31"),
        ("what changed this year", "2023-01-01", "2023-12-31"),
        ("what did I start two years ago", "2021-01-01", "2021-12-31"),
        ("where did we go in May", "2023-05-01", "2023-05-31"),
        ("where did we go in June", "2022-06-01", "2022-06-30"),  # the latest June begun
        ("where did we go last May", "2022-05-01", "2022-05-31"),
        ("where did we go in May 2022", "2022-05-01", "2022-05-31"),
        ("Which hobby did Sam take up in October 2023?", "2023-10-01", "2023-10-31"),
        ("Which classes did Evan join in mid-August 2023?", "2023-08-01", "2023-08-31"),
        ("what did I say on 8 May 2023", "2023-05-08", "2023-05-08"),
        ("news from the 9th of December, 2022", "2022-12-09", "2022-12-09"),
        ("what happened on May 3rd?", "2023-05-03", "2023-05-03"),
        ("what happened on June 3rd?", "2022-06-03", "2022-06-03"),  # not yet this year
        ("the 2023-04-01 meeting", "2023-04-01", "2023-04-01"),
        ("what cities did Dave visit in 2022?", "2022-01-01", "2022-12-31"),
        ("what changed since March", "2023-03-01", "2023-05-10"),
        ("what changed since 2021", "2021-01-01", "2023-05-10"),
    ],
)
def test_a_question_names_a_window(text, first, last):
    assert days(query_window(text, NOW)) == (first, last)


@pytest.mark.parametrize(
    "text",
    [
        "may I ask you something?",  # a month's name that is a word
        "where did we march to?",
        "I'll see you Monday",  # a bare weekday
        "what did you recommend last time?",
        "when did I adopt my dog?",  # asks for a time, names none
        "what happened on 31 February?",  # no such day
        "I paid 2023 euros",
        "",
    ],
)
def test_no_window_where_no_time_is_named(text):
    assert query_window(text, NOW) is None


def test_the_expression_can_be_left_out_of_the_question():
    window = query_window("what did I eat with Tom yesterday?", NOW)
    assert window is not None and window.relative and window.expression == "yesterday"
    assert window.cut_from("what did I eat with Tom yesterday?") == "what did I eat with Tom  ?"
    assert not query_window("where did we go in May 2022", NOW).relative


def test_days_begin_at_midnight_in_nows_time_zone():
    tokyo = _dt.timezone(_dt.timedelta(hours=9))
    window = query_window("yesterday", NOW.astimezone(tokyo))  # 11 May, 00:00 in Tokyo
    assert window.start == _dt.datetime(2023, 5, 10, tzinfo=tokyo)


def test_a_fact_speaks_of_the_time_its_relative_words_meant_when_said():
    said = may(4)  # Thursday
    assert days(mentioned_window("We went to the support group yesterday", said)) == ("2023-05-03",) * 2
    assert days(mentioned_window("I'm flying to Lisbon next week", said)) == ("2023-05-08", "2023-05-14")
    assert days(mentioned_window("Our wedding was on 3 September 2016", said)) == ("2016-09-03",) * 2
    # A month or day without a year may be before or after: a fact does not guess.
    assert mentioned_window("My sister's wedding is in June", said) is None
    assert mentioned_window("I adopted a beagle", said) is None


def test_resolved_note_says_what_relative_words_meant():
    assert resolved_note("We went to the support group yesterday", may(4)) == "yesterday = 2023-05-03"
    assert resolved_note("Back from Lisbon last week!", may(4)) == "last week = 2023-04-24..2023-04-30"
    assert resolved_note("Our wedding was on 3 September 2016", may(4)) == ""  # a date says itself
    assert resolved_note("I adopted a beagle", may(4)) == ""


# -- recall ------------------------------------------------------------------------------


# Own mem: parametrised over the embedder (words alone, and with vectors).
@pytest.fixture(params=["words", "vectors"])
def mem(request):
    embedder = False if request.param == "words" else WordsEmbedder()
    m = memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder, spool=False)
    yield m
    m.close()


class WordsEmbedder:
    """A tiny deterministic embedder (letters' counts): recall with vectors, no model."""

    name = "letters-v1"

    def embed(self, texts):
        return [[t.lower().count(c) + 0.01 for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


def remember_meals(mem) -> dict[str, Fact]:
    said = {
        "sushi": ("I had sushi with Tom at Nobu", may(1)),
        "pizza": ("I had pizza with Tom near the station", may(9)),
        "boiler": ("I fixed the boiler", may(9, 18)),
        "group": ("We went to the support group yesterday", may(4)),
        "lisbon": ("My sister visited from Lisbon", _dt.datetime(2023, 3, 12, tzinfo=UTC)),
    }
    return {key: mem.remember(text, entity_id="alice", at=at) for key, (text, at) in said.items()}


def recalled(mem, question, k=3, now=NOW) -> list[str]:
    return [hit.fact.id for hit in mem.recall(question, entity_id="alice", k=k, now=now)]


def test_facts_of_the_time_asked_about_come_first(mem):
    f = remember_meals(mem)
    # Without a time both meals with Tom match about as well.
    assert set(recalled(mem, "what did I eat with Tom?", k=2)) == {f["pizza"].id, f["sushi"].id}
    assert recalled(mem, "what did I eat with Tom yesterday?")[0] == f["pizza"].id
    assert recalled(mem, "what did I eat with Tom last week?")[0] == f["sushi"].id
    assert recalled(mem, "what did I eat with Tom on 1 May 2023?")[0] == f["sushi"].id
    assert recalled(mem, "who visited in March?")[0] == f["lisbon"].id


def test_a_question_that_is_only_a_time_gets_the_facts_of_that_time(mem):
    f = remember_meals(mem)
    assert set(recalled(mem, "what did I do yesterday?")) == {f["pizza"].id, f["boiler"].id}
    stats = mem.recall_stats()
    assert stats.escalations == 0  # nothing but a time: no meaning to ask a model about


def test_a_fact_is_found_by_the_time_its_words_speak_of(mem):
    f = remember_meals(mem)
    # Said on 4 May, "yesterday" was 3 May.
    assert recalled(mem, "what happened on May 3rd?")[0] == f["group"].id
    assert recalled(mem, "what did we do on Wednesday last week?", now=may(8))[0] == f["group"].id


def test_a_time_no_fact_is_of_is_ignored():
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=False, spool=False)
    remember_meals(mem)
    plain = mem.recall("what did I eat with Tom?", entity_id="alice", now=NOW)
    # The same words ("ago" is in no fact) and scores: no fact gained the time's weight.
    assert mem.recall("what did I eat with Tom two years ago?", entity_id="alice", now=NOW) == plain
    mem.close()


def test_now_defaults_to_the_current_time(mem):
    today = mem.remember("I had ramen with Tom", entity_id="alice")
    mem.remember(
        "I had curry with Tom", entity_id="alice", at=memtap.protocol.model.utcnow() - _dt.timedelta(days=3)
    )
    assert recalled(mem, "what did I eat with Tom today?", now=None)[0] == today.id


def test_a_removed_fact_is_not_of_any_time():
    index = EntityIndex()
    facts = [Fact(entity_id="a", text=f"meal {i}", created_at=may(9)) for i in range(3)]
    index.add(facts)
    index.remove([facts[0].id])
    window = query_window("yesterday", NOW)
    assert index.in_window(window).tolist() == [False, True, True]
    found = index.search("anything", window=window, k=5)
    assert {f.id for f, _ in found} == {facts[1].id, facts[2].id}


def test_the_slots_of_a_time_follow_every_change_of_the_index():
    """A search asks which slots are of the question's time twice (is any? which?), and
    the answer is kept for the same window: it must follow facts added and removed, and
    a search limited to some slots (excluded facts) must not narrow what is kept."""
    index = EntityIndex()
    facts = [Fact(entity_id="a", text=f"meal {i}", created_at=may(9)) for i in range(60)]
    index.add(facts[:50])
    window = query_window("yesterday", NOW)
    assert index.in_window(window).sum() == 50
    found = index.search("meal", window=window, k=60, exclude=[facts[0].id])
    assert len(found) == 49
    assert index.in_window(window).sum() == 50  # the excluded fact is still of that time
    index.add(facts[50:])
    assert index.in_window(window).sum() == 60
    index.remove([facts[1].id, facts[55].id])
    assert index.in_window(window).sum() == 58
    assert {f.id for f, _ in index.search("meal", window=window, k=60)} == {
        f.id for f in facts if f.id not in (facts[1].id, facts[55].id)
    }
    with pytest.raises(ValueError):  # kept for the next ask: nobody may change it
        index.in_window(window)[0] = False


def test_the_index_grows_with_the_times_of_its_facts():
    index = EntityIndex()
    facts = [Fact(entity_id="a", text=f"went out yesterday {i}", created_at=may(5)) for i in range(100)]
    index.add(facts)  # past the initial capacity: the mention arrays grow with the rest
    assert index.in_window(query_window("on 4 May 2023", NOW)).sum() == 100
    assert index.in_window(query_window("on 6 May 2023", NOW)).sum() == 0


def test_the_block_keeps_dates_and_says_what_relative_words_meant(mem):
    f = remember_meals(mem)
    assert fact_line(f["group"]) == (
        "- [2023-05-04] We went to the support group yesterday (yesterday = 2023-05-03)"
    )
    assert fact_line(f["sushi"]) == "- [2023-05-01] I had sushi with Tom at Nobu"
