"""Conversation history: what a session said before, and how much of it to inject.

The request path must not wait for the store on every call, so each :class:`memtap.Memory`
keeps a bounded, in-process cache of recent session histories (:class:`SessionHistories`):
read from the store once per session (plus any exchange still waiting to be written), then
kept current as calls complete. :class:`HistoryBudget` picks what fits, never separating
a tool call from its results. :class:`HistoryPlugin` is core's built-in injector.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import attrs

from .hookspecs import hookimpl
from .model import Attribution, Message
from .wire import HistoryInjection, InjectionRequest

log = logging.getLogger("memtap.history")

#: Characters per token for the approximate token count (no tokenizer on the hot path).
CHARS_PER_TOKEN = 4
#: Tokens counted for a message's framing (role, separators), as providers roughly do.
MESSAGE_OVERHEAD_TOKENS = 4


def approx_tokens(message: Message) -> int:
    """A cheap, provider-neutral token estimate for one message."""
    chars = len(message.content) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return MESSAGE_OVERHEAD_TOKENS + (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def same_turn(a: Message, b: Message) -> bool:
    """Whether two messages are the same conversation turn (as an app would resend it)."""
    return (
        a.role == b.role
        and a.content == b.content
        and a.tool_call_id == b.tool_call_id
        and tuple(c.id for c in a.tool_calls) == tuple(c.id for c in b.tool_calls)
    )


def overlap(history: Sequence[Message], request: Sequence[Message]) -> int:
    """How many leading request messages repeat the end of ``history``.

    An app that keeps its own conversation resends earlier turns; they must be neither
    injected twice nor captured twice. Returns the largest ``k`` with
    ``history[-k:] == request[:k]``.
    """
    if not history or not request:
        return 0
    first = request[0]
    n = len(history)
    for start in range(max(0, n - len(request)), n):
        if same_turn(history[start], first) and all(
            same_turn(h, r) for h, r in zip(history[start + 1 :], request[1:])
        ):
            return n - start
    return 0


def tool_units(messages: Sequence[Message]) -> list[list[Message]]:
    """Group messages into units that must stay together: an assistant message with tool
    calls followed by its tool results, or a single message. Tool results whose call is
    not in ``messages`` are dropped (a provider rejects them)."""
    units: list[list[Message]] = []
    open_calls: set[str] = set()
    for m in messages:
        if m.role == "tool":
            if m.tool_call_id in open_calls and units:
                units[-1].append(m)
            continue
        open_calls = {c.id for c in m.tool_calls} if m.role == "assistant" else set()
        units.append([m])
    return units


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

    def select(self, history: Sequence[Message]) -> list[Message]:
        """The newest part of ``history`` that fits, whole tool units only, starting at a
        user turn when there is one. Walks back from the end: the cost is what is chosen,
        not the length of the history."""
        if self.max_messages == 0 or self.max_tokens == 0:
            return []
        chosen: list[list[Message]] = []
        count = tokens = 0
        for unit in _units_newest_first(history):
            unit_tokens = sum(approx_tokens(m) for m in unit)
            if count + len(unit) > self.max_messages or tokens + unit_tokens > self.max_tokens:
                break
            chosen.append(unit)
            count += len(unit)
            tokens += unit_tokens
        chosen.reverse()
        while len(chosen) > 1 and chosen[0][0].role != "user":
            chosen.pop(0)
        return [m for unit in chosen for m in unit]


def _units_newest_first(messages: Sequence[Message]) -> Iterator[list[Message]]:
    """:func:`tool_units`, newest first, computed lazily from the end."""
    results: list[Message] = []
    for m in reversed(messages):
        if m.role == "tool":
            results.append(m)
            continue
        if results and m.role == "assistant" and m.tool_calls:
            ids = {c.id for c in m.tool_calls}
            answered = [r for r in reversed(results) if r.tool_call_id in ids]
            yield [m, *answered]
        else:
            yield [m]
        results = []


class _Pending:
    """Messages that will exist once a captured call is formatted (resolved lazily)."""

    __slots__ = ("resolve",)

    def __init__(self, resolve: Callable[[], Sequence[Message]]) -> None:
        self.resolve = resolve


#: Seconds before a session whose history could not be read is read again.
RELOAD_AFTER_FAILURE = 5.0


class _Entry:
    """One cached session: resolved messages, then calls not yet formatted.

    ``resolving`` makes pending calls resolve one batch at a time, in order, so two
    readers never append completed calls out of order. ``reload_at`` is set when the
    store could not be read: the session is read again after that time.
    """

    __slots__ = ("messages", "pending", "reload_at", "resolving")

    def __init__(self, messages: list[Message], reload_at: float | None = None) -> None:
        self.messages = messages
        self.pending: list[_Pending] = []
        self.resolving = threading.Lock()
        self.reload_at = reload_at


class SessionHistories:
    """A bounded LRU cache of session histories, keyed by (entity, session).

    ``load`` reads a session from the store on a miss; ``max_messages`` bounds what is kept
    per session and ``max_sessions`` how many sessions are kept.
    """

    def __init__(
        self,
        load: Callable[[Attribution, int], list[Message]],
        *,
        max_sessions: int = 1024,
        max_messages: int = 200,
    ) -> None:
        self._load = load
        self._max_sessions = max_sessions
        self._max_messages = max_messages
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    @staticmethod
    def _key(attribution: Attribution) -> tuple[str, str]:
        return (attribution.entity_id, attribution.session_id)

    def get(self, attribution: Attribution) -> list[Message]:
        """The session's recent messages, oldest first (do not modify the list)."""
        key = self._key(attribution)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None:
            entry = self._fill(attribution)
        elif entry.reload_at is not None and time.monotonic() >= entry.reload_at:
            self._reload(attribution, entry)
        if entry.pending:
            with entry.resolving:
                self._resolve(entry)
        return entry.messages

    def _read(self, attribution: Attribution) -> list[Message] | None:
        try:
            return list(self._load(attribution, self._max_messages))
        except Exception:
            log.warning(
                "could not read history of session %r; continuing without it (retried in %.0f s)",
                attribution.session_id,
                RELOAD_AFTER_FAILURE,
                exc_info=True,
            )
            return None

    def _fill(self, attribution: Attribution) -> _Entry:
        loaded = self._read(attribution)
        key = self._key(attribution)
        with self._lock:
            # A call may have completed while we were loading: keep what it appended.
            current = self._entries.get(key)
            if current is not None:
                return current
            retry = None if loaded is not None else time.monotonic() + RELOAD_AFTER_FAILURE
            entry = self._entries[key] = _Entry(loaded or [], retry)
            while len(self._entries) > self._max_sessions:
                self._entries.popitem(last=False)
            return entry

    def _reload(self, attribution: Attribution, entry: _Entry) -> None:
        entry.reload_at = time.monotonic() + RELOAD_AFTER_FAILURE
        loaded = self._read(attribution)
        if loaded is None:
            return
        with entry.resolving:
            self._resolve(entry)
            with self._lock:
                known = {m.exchange_id for m in loaded if m.exchange_id}
                newer = [m for m in entry.messages if m.exchange_id is None or m.exchange_id not in known]
                entry.messages = (loaded + newer)[-self._max_messages :]
                entry.reload_at = None

    def _resolve(self, entry: _Entry) -> None:
        with self._lock:
            pending, entry.pending = entry.pending, []
        added: list[Message] = []
        for item in pending:
            try:
                added.extend(item.resolve())
            except Exception:
                log.debug("pending exchange could not be read for history", exc_info=True)
        with self._lock:
            # Copy-on-write: a list handed out by get() is never changed under its reader.
            entry.messages = (entry.messages + added)[-self._max_messages :]

    def append(self, attribution: Attribution, resolve: Callable[[], Sequence[Message]]) -> None:
        """Add a completed call's messages (resolved when first needed), if the session is
        cached; otherwise the next read loads it from the store."""
        key = self._key(attribution)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry.pending.append(_Pending(resolve))

    def drop(self, *, entity_id: str | None = None) -> None:
        """Forget cached sessions (of one entity, or all)."""
        with self._lock:
            for key in [k for k in self._entries if entity_id is None or k[0] == entity_id]:
                del self._entries[key]


class HistoryPlugin:
    """Built-in injector: puts the session's earlier turns in front of the request."""

    def __init__(self, histories: SessionHistories, budget: HistoryBudget) -> None:
        self.histories = histories
        self.budget = budget

    @hookimpl
    def memtap_request_injections(self, request: InjectionRequest) -> list[HistoryInjection]:
        """Inject the budgeted part of the session history the request does not repeat
        (none when ``request.history`` is off: then only what it repeats is reported)."""
        if self.budget.max_messages == 0:
            return []
        history = self.histories.get(request.attribution)
        present = overlap(history, request.request.messages)
        if not request.history:
            return [HistoryInjection(already_present=present)]
        selected = self.budget.select(history[: len(history) - present])
        return [HistoryInjection(messages=selected, already_present=present)]
