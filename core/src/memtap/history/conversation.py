"""How a session's stored conversation meets a new request: what the request resends, and
which stored turns may be injected in front of it.

Three rules hold whatever the conversation's length and however the app sends it (everything
again, a sliding window, or only its new messages):

* **Resent turns are recognised** (:func:`overlap`): the request's leading messages that
  repeat the end of the stored conversation are neither captured nor injected again. They are
  found from the end, by comparing the stored conversation's latest messages with the request
  (at most :data:`VERIFY_DEPTH` of them), so the work does not grow with the conversation and
  does not depend on how much of it is cached.
* **Tool calls are injected answered** (:func:`tool_units`): an assistant message with tool
  calls is injected with the calls its results answer and those results, right after it.
  Unanswered calls are dropped (the assistant's text, if any, is kept): providers reject a
  call without its result, and every later request with it. A call the request itself
  answers (its leading tool results: an app that sends only new messages) counts as answered,
  and that unit is always injected.
* **Nothing is injected twice** (:func:`plan_history`): a stored message the request already
  carries is never injected, even when the request does not line up with the stored end.

:class:`HistoryBudget` bounds what is injected, newest first, whole units only.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Container, Iterable, Iterator, Sequence

import attrs

from memtap.protocol.model import Message
from memtap.redact import REDACTED, redact_text

#: Characters per token for the approximate token count (no tokenizer on the hot path).
CHARS_PER_TOKEN = 4
#: Tokens counted for a message's framing (role, separators), as providers roughly do.
MESSAGE_OVERHEAD_TOKENS = 4
#: How many of the stored conversation's latest messages must repeat, in order, at the end of
#: a request's resent part (fewer when the resent part is shorter): enough to tell a resend
#: from a coincidence, few enough that an app which edits old turns (truncated tool outputs,
#: a summary in front of a window) is still recognised as resending.
VERIFY_DEPTH = 8


def approx_tokens(message: Message) -> int:
    """A cheap, provider-neutral token estimate for one message."""
    chars = len(message.content)
    if message.tool_calls:
        chars += sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return MESSAGE_OVERHEAD_TOKENS + (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def same_text(a: str, b: str) -> bool:
    """Whether two texts are the same turn's text: equal, or equal once the app's own copy
    is redacted (memtap stores a turn with :data:`~memtap.redact.REDACTED` where the app,
    resending it, still holds the secret)."""
    if a == b:
        return True
    if REDACTED in b and redact_text(a) == b:
        return True
    return REDACTED in a and redact_text(b) == a


def same_turn(a: Message, b: Message) -> bool:
    """Whether two messages are the same conversation turn (as an app would resend it;
    a stored turn is redacted: :func:`same_text`)."""
    return (
        a.role == b.role
        and a.tool_call_id == b.tool_call_id
        and tuple(c.id for c in a.tool_calls) == tuple(c.id for c in b.tool_calls)
        and same_text(a.content, b.content)
    )


def _align(newest_first: Iterator[Message], request: Sequence[Message]) -> tuple[int, list[Message]]:
    """The overlap of ``request`` with a stored conversation given newest first, and the
    stored messages read to find it (at most :data:`VERIFY_DEPTH`, newest first)."""
    tail = list(itertools.islice(newest_first, VERIFY_DEPTH))
    if not tail or not request:
        return 0, tail
    last = tail[0]
    for j in range(len(request) - 1, -1, -1):  # from the end: the new messages come last
        if same_turn(request[j], last) and all(
            same_turn(request[j - i], tail[i]) for i in range(1, min(j + 1, len(tail)))
        ):
            return j + 1, tail
    return 0, tail


def overlap(history: Sequence[Message], request: Sequence[Message]) -> int:
    """How many leading request messages resend the stored conversation ``history``.

    The resent part ends with the request message that repeats ``history``'s last message
    (the latest such one whose preceding messages also repeat ``history``'s, compared back
    :data:`VERIFY_DEPTH` messages at most): an app that resends everything, a window of it,
    or (0) only its new messages. The cost is the number of new messages plus a bound, not
    the length of the conversation.
    """
    return _align(reversed(history), request)[0]


def _answered_unit(call: Message, results: Sequence[Message], answered_next: Container[str]) -> list[Message]:
    """``call`` (an assistant message with tool calls) with only its answered calls, followed
    by their results (oldest first, one per call); answered means by one of ``results`` or, for
    ``answered_next``, by what follows. With no answered call: its text alone, or nothing."""
    ids = {c.id for c in call.tool_calls}
    kept: list[Message] = []
    seen: set[str] = set()
    for result in results:
        if result.tool_call_id in ids and result.tool_call_id not in seen:
            seen.add(result.tool_call_id)
            kept.append(result)
    calls = tuple(c for c in call.tool_calls if c.id in seen or c.id in answered_next)
    if not calls:
        return [attrs.evolve(call, tool_calls=())] if call.content else []
    head = call if len(calls) == len(call.tool_calls) else attrs.evolve(call, tool_calls=calls)
    return [head, *kept]


def units_newest_first(
    newest_first: Iterable[Message], answered_next: Container[str] = frozenset()
) -> Iterator[list[Message]]:
    """The injectable units of a conversation given newest first, newest first (each unit
    oldest first): a single user or assistant message, or an assistant message with its
    answered tool calls and their results (:func:`tool_units`). ``answered_next`` are the
    call ids answered right after the conversation (by the request's leading tool results):
    they count for the newest unit only. Lazy: the cost is what the caller takes."""
    results: list[Message] = []  # tool messages after the current position, newest first
    newest = True
    for m in newest_first:
        if m.role == "tool":
            results.append(m)
            continue
        if m.role == "assistant" and m.tool_calls:
            unit = _answered_unit(m, results[::-1], answered_next if newest else ())
            if unit:
                yield unit
        elif m.content:
            yield [m]
        results = []
        newest = False


def tool_units(
    messages: Sequence[Message], answered_next: Container[str] = frozenset()
) -> list[list[Message]]:
    """Group messages into the units history may inject, oldest first: an assistant message
    with tool calls followed by its results, or a single message. Calls that no result
    answers are dropped (the message's text is kept, if any: a provider rejects a call
    without its result); tool results whose call is not in ``messages`` are dropped (a
    provider rejects them); empty messages are dropped. ``answered_next``: call ids the
    messages following ``messages`` answer (they keep the last call)."""
    return list(reversed(list(units_newest_first(reversed(messages), answered_next))))


def leading_results(request: Sequence[Message]) -> frozenset[str]:
    """Call ids answered by the tool results a request starts with."""
    ids = []
    for m in request:
        if m.role != "tool":
            break
        if m.tool_call_id:
            ids.append(m.tool_call_id)
    return frozenset(ids)


def _relies_on(unit: Sequence[Message], answered_next: Container[str]) -> bool:
    head = unit[0]
    return head.role == "assistant" and any(c.id in answered_next for c in head.tool_calls)


@attrs.frozen
class HistoryBudget:
    """How much history to inject: at most ``max_messages`` messages and about
    ``max_tokens`` tokens (characters / 4), newest first. ``max_messages=0`` turns
    history injection off."""

    max_messages: int = 20
    max_tokens: int = 2000

    def __attrs_post_init__(self) -> None:
        if self.max_messages < 0 or self.max_tokens < 0:
            raise ValueError("HistoryBudget limits must be zero or positive")

    @property
    def off(self) -> bool:
        """Whether history injection is turned off."""
        return self.max_messages == 0 or self.max_tokens == 0

    def select(
        self, history: Sequence[Message], answered_next: Container[str] = frozenset()
    ) -> list[Message]:
        """The newest part of ``history`` that fits, whole answered tool units only
        (:func:`tool_units`), starting at a user turn when there is one. ``answered_next``:
        call ids the request's leading tool results answer; the call they answer is always
        included (the request is invalid without it), even beyond the budget. Walks back
        from the end: the cost is what is chosen, not the length of the history."""
        return self.choose(units_newest_first(reversed(history), answered_next), answered_next)

    def choose(
        self, units: Iterable[list[Message]], answered_next: Container[str] = frozenset()
    ) -> list[Message]:
        """:meth:`select` over units given newest first (:func:`units_newest_first`)."""
        if self.off:
            return []
        max_messages, max_tokens = self.max_messages, self.max_tokens
        chosen: list[list[Message]] = []
        count = tokens = 0
        for unit in units:
            unit_tokens = approx_tokens(unit[0]) if len(unit) == 1 else sum(map(approx_tokens, unit))
            over = count + len(unit) > max_messages or tokens + unit_tokens > max_tokens
            if over and (chosen or not _relies_on(unit, answered_next)):
                break  # only the unit the request's leading results answer may go over
            chosen.append(unit)
            count += len(unit)
            tokens += unit_tokens
        chosen.reverse()
        while len(chosen) > 1 and chosen[0][0].role != "user":
            chosen.pop(0)
        return [m for unit in chosen for m in unit]


@attrs.frozen
class HistoryPlan:
    """What the stored conversation contributes to one request.

    ``messages`` are injected in front of the request (oldest first); the request's first
    ``present`` messages resend the stored conversation (not captured again);
    ``resent_exchange_ids`` are the stored exchanges those resent messages came from.
    """

    messages: tuple[Message, ...] = ()
    present: int = 0
    resent_exchange_ids: frozenset[str] = frozenset()


def _turn_key(m: Message, content: str | None = None) -> tuple[object, ...]:
    return (
        m.role,
        m.content if content is None else content,
        m.tool_call_id,
        tuple(c.id for c in m.tool_calls) if m.tool_calls else (),
    )


class _Carried:
    """What a request carries, built on first use: a stored message is carried when it is
    the same turn as one of the request's, answers a call the request answers, or makes a
    call with an id the request has (sending those twice is an error)."""

    def __init__(self, request: Sequence[Message]) -> None:
        self._request = request
        self._turns: set[tuple[object, ...]] | None = None
        self._texts: set[str] = set()  # the request's texts: most stored turns share none
        self._redacted: set[tuple[object, ...]] | None = None  # the turns as memtap stores them
        self._answered: set[str] = set()  # call ids the request's tool messages answer
        self._called: set[str] = set()  # call ids the request's assistant messages make

    def __contains__(self, message: Message) -> bool:
        turns = self._turns
        if turns is None:
            turns = self._turns = set()
            for m in self._request:
                turns.add(_turn_key(m))
                self._texts.add(m.content)
                if m.role == "tool" and m.tool_call_id:
                    self._answered.add(m.tool_call_id)
                if m.tool_calls:
                    self._called.update(c.id for c in m.tool_calls)
        content = message.content
        if content in self._texts and _turn_key(message) in turns:
            return True
        if REDACTED in content:  # stored redacted: the request holds the secret
            if self._redacted is None:
                self._redacted = {_turn_key(m, redact_text(m.content)) for m in self._request}
            if _turn_key(message) in self._redacted:
                return True
        if message.role == "tool":
            return message.tool_call_id in self._answered
        if not message.tool_calls or not self._called:
            return False
        return any(c.id in self._called for c in message.tool_calls)


class _Results:
    """The call ids a request's tool messages answer, collected on first use (a history
    whose newest unit is no tool call never needs them)."""

    def __init__(self, request: Sequence[Message]) -> None:
        self._request = request
        self._ids: set[str] | None = None

    def __contains__(self, call_id: object) -> bool:
        if self._ids is None:
            self._ids = {m.tool_call_id for m in self._request if m.role == "tool" and m.tool_call_id}
        return call_id in self._ids


def _not_carried(newest_first: Iterable[Message], carried: _Carried) -> Iterator[Message]:
    """The stored messages (given newest first) that may be injected in front of a request
    that did not line up with their end: not those it carries, nor the replies that followed
    a user turn it carries, up to the next user turn (the request holds its own version of
    that turn: injected, the stored replies would stand before it, out of order, or next to
    another reply of the same role). Lazy, newest first: the replies after a user turn wait
    until that turn is reached (the budget usually takes a few turns of a long tail)."""
    replies: list[Message] = []  # newer than the current position, up to the next user turn
    for m in newest_first:
        if m.role != "user":
            replies.append(m)
            continue
        if m not in carried:
            for r in replies:
                if r not in carried:
                    yield r
            yield m
        replies = []
    for r in replies:
        if r not in carried:
            yield r


def plan_history(
    history: Sequence[Message], request: Sequence[Message], budget: HistoryBudget
) -> HistoryPlan:
    """What of ``history`` (a session's latest stored messages, oldest first) to inject in
    front of ``request`` (its conversation messages), and how much of the request resends it.

    The stored conversation is read from its end, as answered tool units (an unanswered call
    is neither injected nor expected to be resent: a request resending the conversation
    without it still lines up). The request's resent part is found (:func:`overlap`); of what
    comes before it, the messages the request does not carry are chosen by ``budget``.
    """
    if not history:
        return HistoryPlan()
    stored = _messages_newest_first(units_newest_first(reversed(history), _Results(request)))
    present, tail = _align(stored, request)
    if present >= len(history):  # the request resends all that is cached: nothing to walk
        ids = frozenset(m.exchange_id for m in history if m.exchange_id)
        return HistoryPlan(present=present, resent_exchange_ids=ids)
    rest = itertools.chain(tail, stored)
    resent = list(itertools.islice(rest, present))
    resent_ids = frozenset(m.exchange_id for m in resent if m.exchange_id)
    if budget.off:
        return HistoryPlan(present=present, resent_exchange_ids=resent_ids)
    answered_next = leading_results(request)
    candidates = _not_carried(rest, _Carried(request))
    chosen = budget.choose(units_newest_first(candidates, answered_next), answered_next)
    return HistoryPlan(messages=tuple(chosen), present=present, resent_exchange_ids=resent_ids)


#: The budget that injects nothing: what a request resends is still found.
NO_HISTORY = HistoryBudget(max_messages=0)


def resent_count(history: Sequence[Message], request: Sequence[Message]) -> int:
    """How many of ``request``'s leading messages resend ``history`` (:func:`plan_history`
    with nothing to inject): the resend check of a call no history goes into.

    Every call of a session is checked (in the capture writer), and most resend nothing: an
    app that sends only its new turn. When the stored conversation ends with a plain message
    (no tool call, not a result, some text), that message alone is its newest unit, and a
    request resends the conversation only if one of its messages is the same turn
    (:func:`_align`): without one, the answer is 0 with no walk."""
    if not history or not request:
        return 0
    newest = history[-1]
    plain = newest.role != "tool" and not newest.tool_calls and newest.content
    if plain and not any(same_turn(m, newest) for m in reversed(request)):
        return 0
    return plan_history(history, request, NO_HISTORY).present


def _messages_newest_first(units: Iterable[list[Message]]) -> Iterator[Message]:
    for unit in units:
        if len(unit) == 1:
            yield unit[0]
        else:
            yield from reversed(unit)


class _LastPlan(threading.local):
    key: tuple[Sequence[Message], Sequence[Message], HistoryBudget] | None = None
    plan: HistoryPlan = HistoryPlan()


_last = _LastPlan()


def cached_plan(history: Sequence[Message], request: Sequence[Message], budget: HistoryBudget) -> HistoryPlan:
    """:func:`plan_history`, remembered for the last arguments in each thread (compared by
    identity): the history and the recall injectors of one request ask for the same plan,
    which is then made once."""
    key = _last.key
    if key is not None and key[0] is history and key[1] is request and key[2] == budget:
        return _last.plan
    plan = plan_history(history, request, budget)
    _last.key, _last.plan = (history, request, budget), plan
    return plan
