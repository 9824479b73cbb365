"""How a stored conversation meets a request: resent turns, answered tool units, nothing twice.

The property tests build realistic sessions (user turns, tool rounds the app answers, tool
calls the app never runs), store them as memtap does, and send the next request the way the
three kinds of app do (everything again, a sliding window, only the new messages, tool
results answering a stored call). Whatever the history cache holds, the body memtap sends
must pass the provider's validation (:mod:`memtap.testing.validation`), carry no message
twice, and capture only the new messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from conversation_support import assistant, conversation, tool, user
from hypothesis import given, settings
from hypothesis import strategies as st

from memtap.formats.openai_chat import write_message
from memtap.history.conversation import (
    NO_HISTORY,
    VERIFY_DEPTH,
    HistoryBudget,
    _Carried,
    _not_carried,
    approx_tokens,
    leading_results,
    overlap,
    plan_history,
    resent_count,
    tool_units,
)
from memtap.protocol.model import Message
from memtap.redact import REDACTED, redact_text
from memtap.testing.secrets import SECRETS
from memtap.testing.sessions import Round, SessionScript
from memtap.testing.validation import check_openai_chat

WIDE = HistoryBudget(max_messages=10_000, max_tokens=10_000_000)


def wire(messages: Sequence[Message]) -> dict[str, object]:
    return {"model": "m", "messages": [write_message(m) for m in messages]}


def sent(
    history: Sequence[Message], request: Sequence[Message], budget: HistoryBudget = WIDE
) -> list[Message]:
    return [*plan_history(history, request, budget).messages, *request]


# -- unanswered tool calls ---------------------------------------------------------------


def test_an_unanswered_call_without_text_is_not_injected():
    history = [user("weather?"), assistant(calls=["c1"])]
    plan = plan_history(history, [user("never mind")], WIDE)
    assert plan.messages == (user("weather?"),)
    assert check_openai_chat(wire(sent(history, [user("never mind")]))) is None


def test_an_unanswered_call_keeps_the_assistants_text():
    history = [user("weather?"), assistant("Let me check.", calls=["c1"])]
    plan = plan_history(history, [user("never mind")], WIDE)
    assert plan.messages == (user("weather?"), assistant("Let me check."))


def test_partly_answered_calls_keep_only_the_answered_ones():
    history = [user("q"), assistant(calls=["c1", "c2"]), tool("c2", "two"), assistant("done")]
    plan = plan_history(history, [user("next")], WIDE)
    assert plan.messages == (user("q"), assistant(calls=["c2"]), tool("c2", "two"), assistant("done"))


def test_a_request_starting_with_results_gets_the_stored_call_they_answer():
    """An app that sends only its new messages and relies on memtap's history."""
    call = assistant(calls=["c1", "c2"])
    history = [user("q"), call]
    plan = plan_history(history, [tool("c1"), tool("c2")], WIDE)
    assert plan.messages == (user("q"), call)
    assert plan.present == 0


def test_results_answering_some_calls_keep_only_those_calls():
    history = [user("q"), assistant(calls=["c1", "c2"])]
    plan = plan_history(history, [tool("c2")], WIDE)
    assert plan.messages == (user("q"), assistant(calls=["c2"]))
    assert check_openai_chat(wire(sent(history, [tool("c2")]))) is None


def test_the_answered_call_is_injected_even_beyond_the_budget():
    history = [user("q"), assistant("x" * 400, calls=["c1"])]
    tiny = HistoryBudget(max_messages=1, max_tokens=5)
    assert plan_history(history, [tool("c1")], tiny).messages == (assistant("x" * 400, calls=["c1"]),)
    assert plan_history(history, [tool("c1")], HistoryBudget(max_messages=0)).messages == ()


def test_results_elsewhere_in_the_request_do_not_answer_a_stored_call():
    history = [user("q"), assistant(calls=["c1"])]
    request = [user("other"), assistant(calls=["c1"]), tool("c1")]  # a provider reusing ids
    plan = plan_history(history, request, WIDE)
    assert assistant(calls=["c1"]) not in plan.messages


def test_tool_units_drop_unanswered_calls_and_empty_messages():
    messages = [
        user("q"),
        assistant(calls=["c1"]),
        assistant(""),
        user("again"),
        assistant("t", calls=["c2"]),
    ]
    assert tool_units(messages) == [[user("q")], [user("again")], [assistant("t")]]
    assert tool_units(messages, answered_next={"c2"}) == [[user("q")], [user("again")], [messages[-1]]]


def test_leading_results():
    assert leading_results([tool("a"), tool("b"), user("x"), tool("c")]) == {"a", "b"}
    assert leading_results([user("x"), tool("c")]) == frozenset()


# -- resent conversations ------------------------------------------------------------------


def test_a_resent_conversation_longer_than_the_cache_is_recognised():
    full = conversation(150)
    cached = full[-200:]
    request = [*full, user("question 150")]
    plan = plan_history(cached, request, WIDE)
    assert plan.present == len(full)
    assert plan.messages == ()


def test_a_sliding_window_is_recognised_and_completed_from_before_it():
    full = conversation(50)
    request = [*full[-6:], user("question 50")]
    plan = plan_history(full[-200:], request, HistoryBudget(max_messages=4))
    assert plan.present == 6
    assert plan.messages == tuple(full[-10:-6])


def test_only_new_messages_resend_nothing():
    plan = plan_history(conversation(3), [user("question 3")], WIDE)
    assert plan.present == 0
    assert plan.messages == tuple(conversation(3))


def test_a_resend_without_the_unanswered_call_still_lines_up():
    """The app never ran the call and kept its own conversation without it."""
    history = [user("q1"), assistant("a1"), user("weather?"), assistant(calls=["c1"])]
    request = [user("q1"), assistant("a1"), user("weather?"), user("never mind")]
    plan = plan_history(history, request, WIDE)
    assert plan.present == 3
    assert plan.messages == ()


def test_a_resend_keeping_only_the_calls_text_lines_up():
    history = [user("q1"), assistant("Let me look.", calls=["c1"])]
    request = [user("q1"), assistant("Let me look."), user("stop")]
    assert plan_history(history, request, WIDE).present == 2


def test_a_retried_turn_is_recognised():
    """The previous call failed (stored without an answer); the app sends it again."""
    history = [user("q1"), assistant("a1"), user("q2")]
    assert plan_history(history, [user("q1"), assistant("a1"), user("q2")], WIDE).present == 3


def test_edits_older_than_the_verified_depth_do_not_break_the_resend():
    """An agent truncating old tool outputs, or a summary in front of a window."""
    full = conversation(20)
    edited = [user("summary of earlier turns"), *full[2:]]
    assert overlap(full, [*edited, user("new")]) == len(edited)
    recent = [*full[: -VERIFY_DEPTH + 2], user("edited"), *full[-VERIFY_DEPTH + 3 :]]
    assert overlap(full, [*recent, user("new")]) == 0


def test_a_stored_message_the_request_carries_is_never_injected():
    """A fork: the app resends an earlier branch that does not line up with the stored end."""
    history = [user("q1"), assistant("a1"), user("q2"), assistant("a2")]
    request = [user("q1"), assistant("a1"), user("q2 rephrased")]
    plan = plan_history(history, request, WIDE)
    assert plan.present == 0
    assert plan.messages == (user("q2"), assistant("a2"))


def test_the_stored_replies_to_a_turn_the_request_carries_are_not_injected():
    """The app resends a turn with its own version of the reply (another upstream answered,
    the reply was edited): the stored reply is not injected either, or it would stand before
    the turn it answers, next to the previous reply of the same role."""
    history = [user("q0"), assistant("a0"), user("q1"), assistant("a1 as stored")]
    request = [user("q1"), assistant("a1 as the app has it"), user("q2")]
    plan = plan_history(history, request, WIDE)
    assert plan.present == 0
    assert plan.messages == (user("q0"), assistant("a0"))
    assert check_openai_chat(wire(sent(history, request))) is None


def test_a_call_the_request_carries_is_not_injected_with_its_results():
    history = [user("q"), assistant(calls=["c1"]), tool("c1"), assistant("done")]
    request = [user("other"), assistant(calls=["c1"]), tool("c1", "again"), user("more")]
    plan = plan_history(history, request, WIDE)
    ids = [c.id for m in plan.messages for c in m.tool_calls] + [m.tool_call_id for m in plan.messages]
    assert "c1" not in ids
    assert check_openai_chat(wire(sent(history, request))) is None


def test_resent_exchange_ids_name_what_the_request_resends():
    history = [Message("user", "q", exchange_id="e1"), Message("assistant", "a", exchange_id="e1")]
    plan = plan_history(history, [user("q"), assistant("a"), user("next")], WIDE)
    assert plan.resent_exchange_ids == {"e1"}


def test_history_off_still_recognises_resent_turns():
    full = conversation(5)
    plan = plan_history(full, [*full, user("more")], HistoryBudget(max_messages=0))
    assert (plan.messages, plan.present) == ((), 10)


# -- properties ------------------------------------------------------------------------------


_rounds = st.lists(st.builds(Round, st.integers(1, 3), st.booleans(), st.booleans()), max_size=2)
_turns = st.lists(st.tuples(_rounds, st.booleans()), min_size=1, max_size=8)
#: Which texts say a credential, and which (real formats from the redaction corpus: memtap
#: stores them redacted while the app resends them as said).
_secrets = st.lists(st.one_of(st.none(), st.sampled_from([s.text for s in SECRETS if s.inline])), max_size=6)


def _session(turns: list[tuple[list[Round], bool]], secrets: Sequence[str | None] = ()) -> SessionScript:
    s = SessionScript(secrets)
    for rounds, closing in turns:
        s.turn(rounds, closing)
    return s


def _check(history: Sequence[Message], request: Sequence[Message], new: Sequence[Message]) -> None:
    plan = plan_history(history, request, WIDE)
    body = [*plan.messages, *request]
    rejection = check_openai_chat(wire(body))
    assert rejection is None, rejection.message
    calls = [c.id for m in body for c in m.tool_calls]
    results = [m.tool_call_id for m in body if m.role == "tool"]
    assert len(calls) == len(set(calls)) and len(results) == len(set(results))
    # As memtap stores them: a stored turn is redacted, the app's resent copy is not.
    keys = [(m.role, redact_text(m.content)) for m in body if m.content]
    assert len(keys) == len(set(keys)), "a message is carried twice"
    assert list(request[plan.present :]) == list(new), "captured messages are not the new ones"


def _in_cache(history: Sequence[Message], request: Sequence[Message]) -> bool:
    """Whether the calls the request's leading results answer are in the cached history."""
    cached = {c.id for m in history for c in m.tool_calls}
    return leading_results(request) <= cached


# The cache holds at least one whole turn (memtap's holds the latest 200 messages).
@settings(max_examples=300, deadline=None)
@given(turns=_turns, cache=st.integers(12, 60), window=st.integers(0, 40), secrets=_secrets)
def test_every_app_style_gets_a_valid_body_without_repeats(turns, cache, window, secrets):
    s = _session(turns, secrets)
    history = s.stored[-cache:]
    styles = ["everything", "window", "results" if s.pending_calls() else "new"]
    for style in styles:
        request, new = s.next_request(style, window=window)
        if _in_cache(history, request):
            _check(history, request, new)


@settings(max_examples=300, deadline=None)
@given(turns=_turns, secrets=_secrets, cut=st.integers(0, 100))
def test_a_fork_injects_no_turn_the_request_carries(turns, secrets, cut):
    """The app resends an earlier branch (up to a user turn, then a rephrased question) that
    does not line up with the stored end: no stored turn it carries is injected beside it,
    said with a secret or not."""
    s = _session(turns, secrets)
    starts = [i for i, m in enumerate(s.app) if m.role == "user"]
    request = [*s.app[: starts[cut % len(starts)]], user(s.text("rephrased question"))]
    plan = plan_history(s.stored, request, WIDE)
    body = [*plan.messages, *request]
    keys = [(m.role, redact_text(m.content)) for m in body if m.content]
    assert len(keys) == len(set(keys)), "a message is carried twice"
    calls = [c.id for m in body for c in m.tool_calls]
    assert len(calls) == len(set(calls))


@settings(max_examples=300, deadline=None)
@given(turns=_turns, max_messages=st.integers(0, 12), max_tokens=st.integers(0, 200))
def test_selected_history_is_valid_within_the_budget(turns, max_messages, max_tokens):
    s = _session(turns)
    budget = HistoryBudget(max_messages=max_messages, max_tokens=max_tokens)
    request, _ = s.next_request("new")
    chosen = plan_history(s.stored, request, budget).messages
    assert check_openai_chat(wire([*chosen, *request])) is None
    assert len(chosen) <= max_messages
    assert sum(len(m.content) for m in chosen) <= max_tokens * 4


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


def _message_lists(text: st.SearchStrategy[str], max_size: int) -> st.SearchStrategy[list[Message]]:
    """Lists of user, assistant (with up to two calls) and tool messages."""
    return st.lists(
        st.one_of(
            st.builds(user, text),
            st.builds(assistant, text, st.lists(_call_ids, max_size=2, unique=True)),
            st.builds(lambda cid, content: tool(cid, content), _call_ids, text),
        ),
        max_size=max_size,
    )


_messages = _message_lists(_text, 30)


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


def _not_carried_oldest_first(history: Sequence[Message], request: Sequence[Message]) -> list[Message]:
    """The rule stated once, oldest first: a carried message goes, and so do the replies
    after a carried user turn, up to the next user turn."""
    carried = _Carried(request)
    kept: list[Message] = []
    dropping = False
    for m in history:
        if m in carried:
            dropping = dropping or m.role == "user"
            continue
        if m.role == "user":
            dropping = False
        if not dropping:
            kept.append(m)
    return kept


_ROLES = st.sampled_from(["user", "assistant", "tool"])


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(st.tuples(_ROLES, st.integers(0, 5)), max_size=30),
    request=st.lists(st.tuples(_ROLES, st.integers(0, 5)), max_size=8),
)
def test_the_lazy_walk_keeps_what_the_rule_keeps(
    history: list[tuple[str, int]], request: list[tuple[str, int]]
) -> None:
    def message(role: str, n: int) -> Message:
        if role == "tool":
            return Message("tool", f"result {n}", tool_call_id=f"call_{n}")
        return Message(role, f"{role} {n}")

    stored = [message(r, n) for r, n in history]
    sent = [message(r, n) for r, n in request]
    lazy = list(_not_carried(reversed(stored), _Carried(sent)))[::-1]
    assert lazy == _not_carried_oldest_first(stored, sent)


_texts = st.sampled_from(["a", "b", "", REDACTED, f"x {REDACTED}"])


@settings(max_examples=500, deadline=None)
@given(
    history=_message_lists(_texts, 12),
    picks=st.lists(st.integers(0, 11), max_size=6),
    extra=st.lists(st.one_of(st.builds(user, _texts), st.builds(assistant, _texts)), max_size=2),
)
def test_the_resent_count_is_the_plans(history, picks, extra):
    """resent_count's shortcut (no request message is the stored newest turn) answers what
    the whole plan answers: the request mixes stored messages, in any order, and new ones
    (among them a stored call's text without its unanswered call, as an app resends it)."""
    request = [history[i] for i in picks if i < len(history)] + extra
    assert resent_count(history, request) == plan_history(history, request, NO_HISTORY).present
