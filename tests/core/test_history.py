from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtap.history import HistoryBudget, SessionHistories, approx_tokens, overlap, tool_units
from memtap.model import Attribution, Message, ToolCall


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str = "", calls: Sequence[str] = ()) -> Message:
    return Message(
        role="assistant",
        content=text,
        tool_calls=[ToolCall(id=c, name="lookup", arguments='{"q": 1}') for c in calls],
    )


def tool(call_id: str, text: str = "result") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id)


def conversation(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out += [user(f"question {i}"), assistant(f"answer {i}")]
    return out


# -- overlap ------------------------------------------------------------------------------


def test_overlap_app_resending_its_whole_history():
    history = conversation(3)
    request = [*history, user("question 3")]
    assert overlap(history, request) == 6


def test_overlap_partial_when_app_resends_only_a_recent_window():
    history = conversation(3)
    request = [*history[-2:], user("question 3")]
    assert overlap(history, request) == 2


def test_overlap_none_for_a_fresh_turn():
    history = conversation(3)
    assert overlap(history, [user("question 3")]) == 0


def test_overlap_empty_inputs():
    assert overlap([], [user("hi")]) == 0
    assert overlap(conversation(1), []) == 0


def test_overlap_ignores_a_single_coincidentally_equal_message():
    history = [user("ok"), assistant("Noted."), user("ok"), assistant("Done.")]
    request = [user("ok"), assistant("Something else"), user("next")]
    assert overlap(history, request) == 0


def test_overlap_repeated_message_at_tail_matches_only_the_tail():
    history = [user("x"), user("x")]
    assert overlap(history, [user("x"), user("y")]) == 1


def test_overlap_distinguishes_tool_call_ids():
    history = [user("weather?"), assistant(calls=["call_1"])]
    request = [user("weather?"), assistant(calls=["call_2"]), tool("call_2")]
    assert overlap(history, request) == 0


def test_overlap_ignores_store_metadata():
    stored = [Message(role="user", content="hi", exchange_id="ex1"), assistant("hello")]
    assert overlap(stored, [user("hi"), assistant("hello"), user("more")]) == 2


# -- tool_units ---------------------------------------------------------------------------


def test_tool_units_groups_calls_with_their_results():
    call = assistant(calls=["c1", "c2"])
    messages = [user("q"), call, tool("c1"), tool("c2"), assistant("done")]
    assert tool_units(messages) == [[user("q")], [call, tool("c1"), tool("c2")], [assistant("done")]]


def test_tool_units_drops_orphan_tool_results():
    call = assistant(calls=["c1"])
    messages = [tool("c0"), user("q"), call, tool("c1"), tool("c9"), user("again"), tool("c1")]
    assert tool_units(messages) == [[user("q")], [call, tool("c1")], [user("again")]]


def test_tool_units_keeps_plain_messages_single():
    messages = conversation(2)
    assert tool_units(messages) == [[m] for m in messages]


# -- HistoryBudget ------------------------------------------------------------------------


def test_select_respects_max_messages():
    history = conversation(10)
    assert HistoryBudget(max_messages=4, max_tokens=10_000).select(history) == history[-4:]


def test_select_starts_at_a_user_turn():
    history = conversation(10)
    selected = HistoryBudget(max_messages=3, max_tokens=10_000).select(history)
    assert selected == history[-2:]
    assert selected[0].role == "user"


def test_select_respects_max_tokens():
    history = [user("u" * 36), assistant("a" * 36)] * 3
    per_message = approx_tokens(history[0])
    assert per_message == 13
    budget = HistoryBudget(max_messages=100, max_tokens=4 * per_message + per_message - 1)
    assert budget.select(history) == history[-4:]


def test_select_never_splits_a_tool_call_from_its_results():
    call = assistant(calls=["c1", "c2"])
    history = [user("q"), call, tool("c1"), tool("c2"), assistant("done")]
    for max_messages in range(1, 6):
        selected = HistoryBudget(max_messages=max_messages, max_tokens=10_000).select(history)
        assert (call in selected) == (tool("c1") in selected) == (tool("c2") in selected)
    assert HistoryBudget(max_messages=5, max_tokens=10_000).select(history) == history


def test_select_zero_max_messages_disables():
    assert HistoryBudget(max_messages=0).select(conversation(3)) == []


def test_select_zero_max_tokens_disables():
    assert HistoryBudget(max_tokens=0).select(conversation(3)) == []


@pytest.mark.parametrize("kwargs", [{"max_messages": -1}, {"max_tokens": -1}])
def test_budget_negative_limits_raise(kwargs):
    with pytest.raises(ValueError, match="zero or positive"):
        HistoryBudget(**kwargs)


_call_ids = st.sampled_from(["c1", "c2", "c3"])
_text = st.text(alphabet="ab ", max_size=60)
_messages = st.lists(
    st.one_of(
        st.builds(user, _text),
        st.builds(assistant, _text, st.lists(_call_ids, max_size=2, unique=True)),
        st.builds(lambda cid, text: tool(cid, text), _call_ids, _text),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(history=_messages, max_messages=st.integers(0, 12), max_tokens=st.integers(0, 200))
def test_select_property_whole_unit_suffix_within_limits(history, max_messages, max_tokens):
    budget = HistoryBudget(max_messages=max_messages, max_tokens=max_tokens)
    selected = budget.select(history)
    units = tool_units(history)

    suffixes = [[m for unit in units[i:] for m in unit] for i in range(len(units) + 1)]
    assert selected in suffixes

    for j, m in enumerate(selected):
        if m.role == "tool":
            announced = {c.id for p in selected[:j] if p.role == "assistant" for c in p.tool_calls}
            assert m.tool_call_id in announced

    assert len(selected) <= max_messages
    assert sum(approx_tokens(m) for m in selected) <= max_tokens
    if any(m.role == "user" for m in selected):
        assert selected[0].role == "user"
    if units:
        last = units[-1]
        if len(last) <= max_messages and sum(approx_tokens(m) for m in last) <= max_tokens:
            assert selected


# -- SessionHistories ---------------------------------------------------------------------


class CountingLoader:
    def __init__(self, stored: dict[tuple[str, str], list[Message]] | None = None) -> None:
        self.stored = stored or {}
        self.calls: list[tuple[str, str, int]] = []

    def __call__(self, attribution: Attribution, limit: int) -> list[Message]:
        self.calls.append((attribution.entity_id, attribution.session_id, limit))
        return list(self.stored.get((attribution.entity_id, attribution.session_id), []))


ALICE_S1 = Attribution(entity_id="alice", session_id="s1")
BOB_S1 = Attribution(entity_id="bob", session_id="s1")


def test_histories_load_once_per_entity_and_session():
    loader = CountingLoader({("alice", "s1"): conversation(1), ("bob", "s1"): [user("bob's")]})
    histories = SessionHistories(loader, max_messages=50)

    assert histories.get(ALICE_S1) == conversation(1)
    assert histories.get(ALICE_S1) == conversation(1)
    assert histories.get(Attribution(entity_id="alice", session_id="s1", process_id="bot")) == conversation(1)
    assert histories.get(BOB_S1) == [user("bob's")]
    assert histories.get(BOB_S1) == [user("bob's")]

    assert loader.calls == [("alice", "s1", 50), ("bob", "s1", 50)]


def test_histories_resolve_appended_calls_lazily_and_once():
    loader = CountingLoader({("alice", "s1"): conversation(1)})
    histories = SessionHistories(loader)
    histories.get(ALICE_S1)
    resolved = []

    def resolve() -> list[Message]:
        resolved.append(1)
        return [user("question 1"), assistant("answer 1")]

    histories.append(ALICE_S1, resolve)
    assert resolved == []
    assert histories.get(ALICE_S1) == conversation(2)
    assert histories.get(ALICE_S1) == conversation(2)
    assert resolved == [1]
    assert len(loader.calls) == 1


def test_histories_append_to_uncached_session_is_left_to_the_store():
    loader = CountingLoader({("alice", "s1"): conversation(2)})
    histories = SessionHistories(loader)
    resolved = []
    histories.append(ALICE_S1, lambda: resolved.append(1) or [user("never")])

    assert histories.get(ALICE_S1) == conversation(2)
    assert resolved == []


def test_histories_failing_pending_is_skipped():
    histories = SessionHistories(CountingLoader({("alice", "s1"): [user("kept")]}))
    histories.get(ALICE_S1)

    def broken() -> list[Message]:
        raise RuntimeError("format failed")

    histories.append(ALICE_S1, broken)
    histories.append(ALICE_S1, lambda: [assistant("after")])
    assert histories.get(ALICE_S1) == [user("kept"), assistant("after")]


def test_histories_keep_at_most_max_messages_per_session():
    histories = SessionHistories(CountingLoader(), max_messages=5)
    histories.get(ALICE_S1)
    for i in range(20):
        histories.append(ALICE_S1, lambda i=i: [user(f"q{i}"), assistant(f"a{i}")])
    got = histories.get(ALICE_S1)
    assert got == [assistant("a17"), user("q18"), assistant("a18"), user("q19"), assistant("a19")]


def test_histories_evict_least_recently_used_session():
    loader = CountingLoader()
    histories = SessionHistories(loader, max_sessions=2)
    a, b, c = (Attribution(entity_id="e", session_id=s) for s in ("a", "b", "c"))

    histories.get(a)
    histories.get(b)
    histories.get(a)
    histories.get(c)
    assert [call[1] for call in loader.calls] == ["a", "b", "c"]

    histories.get(a)
    histories.get(c)
    assert [call[1] for call in loader.calls] == ["a", "b", "c"]
    histories.get(b)
    assert [call[1] for call in loader.calls] == ["a", "b", "c", "b"]


def test_histories_load_failure_gives_empty_history_and_warns(caplog):
    def load(attribution: Attribution, limit: int) -> list[Message]:
        raise ConnectionError("database is down")

    histories = SessionHistories(load)
    with caplog.at_level(logging.WARNING, logger="memtap.history"):
        assert histories.get(ALICE_S1) == []

    warnings = [r for r in caplog.records if r.name == "memtap.history" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'s1'" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None


def test_histories_drop_one_entity_reloads_only_its_sessions():
    loader = CountingLoader()
    histories = SessionHistories(loader)
    alice_s2 = Attribution(entity_id="alice", session_id="s2")
    for attribution in (ALICE_S1, alice_s2, BOB_S1):
        histories.get(attribution)

    histories.drop(entity_id="alice")
    for attribution in (ALICE_S1, alice_s2, BOB_S1):
        histories.get(attribution)

    assert loader.calls[3:] == [("alice", "s1", 200), ("alice", "s2", 200)]


def test_histories_drop_all():
    loader = CountingLoader()
    histories = SessionHistories(loader)
    histories.get(ALICE_S1)
    histories.get(BOB_S1)
    histories.drop()
    histories.get(ALICE_S1)
    histories.get(BOB_S1)
    assert len(loader.calls) == 4


def test_histories_call_appended_while_another_resolves_is_kept():
    histories = SessionHistories(CountingLoader())
    histories.get(ALICE_S1)
    first = [user("first"), assistant("reply 1")]
    second = [user("second"), assistant("reply 2")]

    def resolve_first() -> list[Message]:
        concurrent = threading.Thread(target=histories.append, args=(ALICE_S1, lambda: second))
        concurrent.start()
        concurrent.join()
        return first

    histories.append(ALICE_S1, resolve_first)
    histories.get(ALICE_S1)
    assert histories.get(ALICE_S1) == first + second


def test_histories_concurrently_resolved_calls_keep_their_order():
    histories = SessionHistories(CountingLoader({("alice", "s1"): [user("loaded")]}))
    histories.get(ALICE_S1)
    first = [user("first"), assistant("reply 1")]
    second = [user("second"), assistant("reply 2")]
    resolving = threading.Event()
    release = threading.Event()

    def slow_first() -> list[Message]:
        resolving.set()
        release.wait(5)
        return first

    histories.append(ALICE_S1, slow_first)
    reader = threading.Thread(target=histories.get, args=(ALICE_S1,))
    reader.start()
    assert resolving.wait(5)
    histories.append(ALICE_S1, lambda: second)
    histories.get(ALICE_S1)
    release.set()
    reader.join(5)

    assert histories.get(ALICE_S1) == [user("loaded"), *first, *second]
