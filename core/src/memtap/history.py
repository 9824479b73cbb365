"""Conversation history: what a session said before, and how much of it to inject.

The request path must not wait for the store on every call, so each :class:`memtap.Memory`
keeps a bounded, in-process cache of recent session histories (:class:`SessionHistories`):
read from the store once per session (plus any exchange still waiting to be written), then
kept current as calls complete. :mod:`memtap.conversation` decides what of it a request
resends and what may be injected (:class:`HistoryBudget` picks what fits, never separating a
tool call from its results). :class:`HistoryPlugin` is core's built-in injector.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from .conversation import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    HistoryBudget,
    HistoryPlan,
    approx_tokens,
    cached_plan,
    overlap,
    same_turn,
    tool_units,
)
from .hookspecs import hookimpl
from .model import Attribution, Message
from .wire import HistoryInjection, InjectionRequest

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "HistoryBudget",
    "HistoryPlugin",
    "SessionHistories",
    "approx_tokens",
    "overlap",
    "same_turn",
    "tool_units",
]

log = logging.getLogger("memtap.history")


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
    """Built-in injector: puts the session's earlier turns in front of the request (those
    the request does not resend or carry, whole answered tool units, within the budget), and
    tells the capture path how many of the request's messages resend stored ones."""

    def __init__(self, histories: SessionHistories, budget: HistoryBudget) -> None:
        self.histories = histories
        self.budget = budget

    def plan(self, request: InjectionRequest) -> HistoryPlan:
        """The history plan of ``request`` (made once per request, whoever asks)."""
        history = self.histories.get(request.attribution)
        return cached_plan(history, request.request.messages, self.budget)

    @hookimpl
    def memtap_request_injections(self, request: InjectionRequest) -> list[HistoryInjection]:
        """Inject the budgeted part of the session history the request does not repeat."""
        plan = self.plan(request)
        if not plan.messages and not plan.present:
            return []
        return [HistoryInjection(messages=plan.messages, already_present=plan.present)]
