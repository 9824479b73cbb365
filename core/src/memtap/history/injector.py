"""Conversation history: what a session said before, and how much of it to inject.

The request path must not wait for the store on every call, so each :class:`memtap.Memory`
keeps a bounded, in-process cache of recent session histories (:class:`SessionHistories`):
read from the store once per session (plus any exchange still waiting to be written), then
kept current as calls complete. Reads run in background threads; a call waits for its
session's read a bounded time (none for a session the store does not have), so a slow or
frozen store never holds a call up for longer. :mod:`memtap.history.conversation` decides what of
it a request resends and what may be injected (:class:`HistoryBudget` picks what fits,
never separating a tool call from its results). Core's built-in injector of it is
:class:`memtap.history.plugin.HistoryPlugin`.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager

from memtap.history.conversation import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    NO_HISTORY,
    HistoryBudget,
    approx_tokens,
    overlap,
    same_turn,
    tool_units,
)
from memtap.history.known_sessions import KnownSessions
from memtap.metrics import count
from memtap.protocol.model import Attribution, Message
from memtap.protocol.wire import InjectionRequest
from memtap.workers.background import DaemonPool

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "NO_HISTORY",
    "HistoryBudget",
    "SessionHistories",
    "approx_tokens",
    "overlap",
    "same_turn",
    "tool_units",
]

log = logging.getLogger("memtap.history.injector")


class _Pending:
    """Messages that will exist once a captured call is formatted (resolved lazily, once)."""

    __slots__ = ("_messages", "exchange_id", "resolve")

    def __init__(self, resolve: Callable[[], Sequence[Message]], exchange_id: str | None = None) -> None:
        self.resolve: Callable[[], Sequence[Message]] | None = resolve
        self._messages: Sequence[Message] | None = None
        #: The id the call's exchange will have (``None``: not known).
        self.exchange_id = exchange_id

    def messages(self) -> Sequence[Message]:
        """The call's messages (none for a call that cannot be read: logged). Once read,
        the call is let go: a later call's resend count holds this entry, and through it
        each call would hold the one before, every call of the session alive."""
        if self._messages is None:
            resolve, self.resolve = self.resolve, None
            try:
                self._messages = tuple(resolve()) if resolve is not None else ()
            except Exception:
                log.debug("pending exchange could not be read for history", exc_info=True)
                self._messages = ()
        return self._messages

    @property
    def resolved(self) -> Sequence[Message] | None:
        """The call's messages if they have been resolved, else ``None``."""
        return self._messages


#: Seconds before a session whose history could not be read is read again.
RELOAD_AFTER_FAILURE = 5.0
#: Seconds the first call of a session that has stored history waits for it to be read;
#: past that the call goes on without it, and the read, finishing in the background, serves
#: the session's next call.
LOAD_DEADLINE = 0.25
#: Threads reading histories (a frozen store may hold each of them until it answers).
LOAD_WORKERS = 4
#: Seconds a call waits for the store to say whether its session has a turn this process
#: does not know, and for that turn to be read (:attr:`SessionHistories.latest`); past that
#: the call goes on with what is cached, and calls do not ask while that check is still
#: waiting for the store (:attr:`SessionHistories.store_late`: a failing store slows one
#: call, not every call).
CATCH_UP_DEADLINE = 0.4

_no_wait: contextvars.ContextVar[bool] = contextvars.ContextVar("memtap_history_no_wait", default=False)


@contextmanager
def without_waiting() -> Iterator[None]:
    """Inside the block, :meth:`SessionHistories.get` never waits for a read (for a caller
    that awaited :meth:`SessionHistories.preload` already: an event loop must not block)."""
    token = _no_wait.set(True)
    try:
        yield
    finally:
        _no_wait.reset(token)


def may_wait() -> bool:
    """Whether the caller may block for a read (not inside :func:`without_waiting`)."""
    return not _no_wait.get()


class _Entry:
    """One cached session: resolved messages, then calls not yet formatted.

    ``resolving`` makes pending calls resolve one batch at a time, in order, so two
    readers never append completed calls out of order. ``loaded`` is set once the store's
    read of the session is over (or failed: ``reload_at`` is then when it is read again);
    until ``wait_until`` (monotonic seconds) callers wait for it, later ones do not.
    """

    __slots__ = (
        "again",
        "future",
        "loaded",
        "messages",
        "pending",
        "reading",
        "reload_at",
        "resolving",
        "wait_until",
    )

    def __init__(self) -> None:
        #: A read of the session is under way; ``again``: read it once more after that one
        #: (another process wrote to the session meanwhile: see :meth:`SessionHistories.refresh`).
        self.reading = False
        self.again = False
        self.messages: list[Message] = []
        self.pending: list[_Pending] = []
        self.resolving = threading.Lock()
        self.reload_at: float | None = None
        self.loaded = threading.Event()
        self.wait_until = 0.0
        self.future: Future[None] | None = None


class SessionHistories:
    """A bounded LRU cache of session histories, keyed by (entity, session).

    ``load`` reads a session from the store; ``max_messages`` bounds what is kept per
    session and ``max_sessions`` how many sessions are kept.

    Reads run in background threads and the request path waits for them at most
    ``deadline`` seconds (fail open: the call goes on without history; the read still
    completes and serves the next call). A session that ``known`` (:class:`KnownSessions`)
    says the store does not have is not waited for at all: it is read in the background
    only in case another process has just created it. A session is read once; a failed read
    is retried in the background :data:`RELOAD_AFTER_FAILURE` seconds later.
    """

    def __init__(
        self,
        load: Callable[[Attribution, int], list[Message]],
        *,
        max_sessions: int = 1024,
        max_messages: int = 200,
        deadline: float = LOAD_DEADLINE,
        known: KnownSessions | None = None,
    ) -> None:
        self._load = load
        self._max_sessions = max_sessions
        self._max_messages = max_messages
        #: Seconds a call waits for its session's first read (see the class docstring).
        self.deadline = deadline
        self._known = known
        #: For a store other processes write to: the id of the session's latest stored
        #: exchange (``None``: none), asked before each call that :meth:`preload` serves;
        #: when this process does not know that exchange, the session is read again
        #: before the call goes on (read-your-writes across processes: see
        #: :meth:`preload`). ``None``: the cache is trusted (one process writes).
        self.latest: Callable[[Attribution], str | None] | None = None
        #: A check of :attr:`latest` outlived its deadline and has not finished: the store
        #: is not answering in time; :attr:`latest` is not asked until it has.
        self.store_late = False
        self._late_read_warned = -math.inf
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._readers = DaemonPool(LOAD_WORKERS, "memtap-history")
        #: Threads of :attr:`latest`'s checks: never queued behind the reads of sessions
        #: other processes wrote to (the change feed starts one per write).
        self._checkers = DaemonPool(LOAD_WORKERS, "memtap-history-check")

    @staticmethod
    def key(attribution: Attribution) -> tuple[str, str]:
        """The cache key of a call's session: ``(entity_id, session_id)``."""
        return (attribution.entity_id, attribution.session_id)

    def get(self, attribution: Attribution) -> list[Message]:
        """The session's recent messages, oldest first (do not modify the list). On the
        session's first call, waits for its read up to :attr:`deadline` (not inside
        :func:`without_waiting`)."""
        key = (attribution.entity_id, attribution.session_id)
        with self._lock:  # the fast path: a cached session, read already
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None or entry.reload_at is not None:
            entry = self._lookup(attribution)
        if not entry.loaded.is_set() and not _no_wait.get():
            remaining = entry.wait_until - time.monotonic()
            if remaining > 0 and not entry.loaded.wait(remaining):
                count("failed", reason="history_deadline")
        if entry.pending:
            with entry.resolving:
                self._resolve(entry)
        return entry.messages

    async def preload(self, attribution: Attribution) -> None:
        """Make sure the session is cached or being read, and await its read (in a
        thread: the event loop is never blocked) up to :attr:`deadline`. A cached session
        costs no await at all, unless :attr:`latest` is set: then the store is asked which
        exchange is the session's latest, and when this process does not know it (another
        process served the session's last turn) the session is read again, both in a
        thread and within :data:`CATCH_UP_DEADLINE` (past it the call goes on with what is
        cached)."""
        import asyncio  # on a coroutine's first use, not at `import memtap` (the command line)

        entry = self._lookup(attribution)
        future = entry.future
        if not entry.loaded.is_set() and future is not None:
            remaining = entry.wait_until - time.monotonic()
            if remaining > 0:
                try:
                    await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), remaining)
                except asyncio.TimeoutError:
                    count("failed", reason="history_deadline")
                    if self.latest is not None and time.monotonic() >= self._late_read_warned + 60:
                        # Another process may have served this session's earlier turns:
                        # the call goes on without them, which must not go unsaid (once a
                        # minute at most: a store that stopped answering would say it on
                        # every new session's call).
                        self._late_read_warned = time.monotonic()
                        log.warning(
                            "session %r was not read within %.2f s; this call goes on without "
                            "its earlier turns (read-your-writes across processes needs the "
                            "store to answer in time)",
                            attribution.session_id,
                            remaining,
                        )
                    return
        if self.latest is None or self.store_late:
            return
        # Also for a session not read yet that this process took for new (another process
        # may have just written its first turns): the store's answer decides.
        try:
            check = self._checkers.submit(self._catch_up, attribution, entry)
        except RuntimeError:  # closed
            return
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(check)), CATCH_UP_DEADLINE)
        except asyncio.TimeoutError:
            count("failed", reason="history_deadline")
            if not check.done() and not self.store_late:
                self.store_late = True
                log.warning(
                    "the store did not say within %.1f s whether session %r has turns this process "
                    "does not know; calls go on with what is cached until it answers",
                    CATCH_UP_DEADLINE,
                    attribution.session_id,
                )
                check.add_done_callback(self._answered)

    def _catch_up(self, attribution: Attribution, entry: _Entry) -> None:
        """Read the session again if the store's latest exchange of it is one this
        process does not know (a thread of the reader pool)."""
        assert self.latest is not None
        try:
            latest = self.latest(attribution)
        except Exception:
            log.warning(
                "could not ask the store for session %r's latest turn", attribution.session_id, exc_info=True
            )
            return
        if latest is None or self._knows(entry, latest):
            return
        loaded = self._read(attribution)
        if loaded is not None:
            if loaded and self._known is not None:
                self._known.add(self.key(attribution))
            self._merge(entry, loaded)

    def _answered(self, check: Future[None]) -> None:
        """A late check has finished: the store answers again."""
        self.store_late = False

    def _knows(self, entry: _Entry, exchange_id: str) -> bool:
        """Whether ``entry`` holds the exchange ``exchange_id`` (cached or pending)."""
        with self._lock:
            pending, messages = list(entry.pending), entry.messages
        if any(p.exchange_id == exchange_id for p in pending):
            return True
        return any(m.exchange_id == exchange_id for m in reversed(messages))

    def _lookup(self, attribution: Attribution) -> _Entry:
        """The session's entry; a new one (its read started) on a miss, its read started
        again when a failed one is due for a retry."""
        key = self.key(attribution)
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if entry.reload_at is None or now < entry.reload_at or not entry.loaded.is_set():
                    return entry
                entry.reload_at = now + RELOAD_AFTER_FAILURE  # one retry at a time
                entry.wait_until = now  # a retry is never waited for
            else:
                entry = self._entries[key] = _Entry()
                while len(self._entries) > self._max_sessions:
                    self._entries.popitem(last=False)
                known = self._known.knows(key) if self._known is not None else None
                if known is False and self._known is not None and self._known.exclusive:
                    # Certainly new (no other process writes to the store): nothing to read.
                    entry.loaded.set()
                    return entry
                # A session the store does not have is read only in case another process
                # has just created it: nothing to wait for.
                entry.wait_until = now if known is False else now + self.deadline
            entry.loaded.clear()
            if entry.reading:  # a refresh is reading it: that read serves
                entry.again = True
                return entry
            entry.reading = True
        self._start_read(attribution, entry)
        return entry

    def _start_read(self, attribution: Attribution, entry: _Entry) -> None:
        try:
            entry.future = self._readers.submit(self._fill, attribution, entry)
        except RuntimeError:  # closed: no more reads
            entry.reading = False
            entry.loaded.set()

    def refresh(self, entity_id: str | None = None, session_id: str | None = None) -> None:
        """Read cached sessions again in the background, because another process wrote to
        them: one session, an entity's, or all of them (no argument). Calls keep getting
        the cached messages until the read is merged in; a read under way is followed by
        another (it may have read the store before the write)."""
        started: list[tuple[tuple[str, str], _Entry]] = []
        with self._lock:
            if entity_id is not None and session_id is not None:  # one session: no scan
                found = self._entries.get((entity_id, session_id))
                targets = [((entity_id, session_id), found)] if found is not None else []
            else:
                targets = [
                    (key, entry)
                    for key, entry in self._entries.items()
                    if (entity_id is None or key[0] == entity_id)
                    and (session_id is None or key[1] == session_id)
                ]
            for key, entry in targets:
                if entry.reading:
                    entry.again = True
                else:
                    entry.reading = True
                    started.append((key, entry))
        for (entity, session), entry in started:
            self._start_read(Attribution(entity_id=entity, session_id=session), entry)

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

    def _fill(self, attribution: Attribution, entry: _Entry) -> None:
        """Read the session into ``entry`` (a background thread), keeping what calls
        appended meanwhile."""
        try:
            with self._lock:
                if self._entries.get(self.key(attribution)) is not entry:
                    return  # evicted or dropped before its turn came
            loaded = self._read(attribution)
            if loaded is None:
                entry.reload_at = time.monotonic() + RELOAD_AFTER_FAILURE
                return
            if loaded and self._known is not None:
                self._known.add(self.key(attribution))
            self._merge(entry, loaded)
            entry.reload_at = None
        finally:
            entry.loaded.set()
            with self._lock:
                again = entry.again and self._entries.get(self.key(attribution)) is entry
                entry.again = False
                entry.reading = again
            if again:
                self._start_read(attribution, entry)

    def _merge(self, entry: _Entry, loaded: list[Message]) -> None:
        """Put the stored ``loaded`` messages before those calls added to ``entry`` (the
        same exchange, stored meanwhile, is kept once)."""
        with entry.resolving:
            self._resolve(entry)
            with self._lock:
                stored = {m.exchange_id for m in loaded if m.exchange_id}
                newer = [m for m in entry.messages if m.exchange_id is None or m.exchange_id not in stored]
                if len(loaded) >= self._max_messages and newer:
                    # The read holds only the latest messages: a cached one older than all
                    # of them fell out of that window (it is not a call still to be stored),
                    # and kept it would follow them, out of order.
                    first = loaded[0].created_at
                    newer = [
                        m for m in newer if m.created_at is None or first is None or m.created_at >= first
                    ]
                entry.messages = (loaded + newer)[-self._max_messages :]

    def _resolve(self, entry: _Entry) -> None:
        with self._lock:
            pending = list(entry.pending)
        if not pending:
            return
        _resolved(pending)  # formats them, outside the lock
        with self._lock:
            self._fold_resolved(entry)

    def snapshot(self, attribution: Attribution) -> Callable[[], list[Message]] | None:
        """The session's messages as they are now, to be read later: for a caller that
        needs them only where its call is formatted (the resend check of a call no history
        is injected into), after the calls still pending now (the capture writer formats
        calls in order). ``None`` while the session's read from the store is not over
        (:meth:`get` then waits for it, a bounded time). Reading it formats only those
        earlier calls: it may be read from inside the formatting of a later one."""
        key = (attribution.entity_id, attribution.session_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None or entry.reload_at is not None:
            entry = self._lookup(attribution)
        if not entry.loaded.is_set():
            return None
        with self._lock:
            messages, pending = entry.messages, list(entry.pending)
        if not pending:
            return lambda: messages
        limit = self._max_messages

        def read() -> list[Message]:
            resolved = _resolved(pending)
            with self._lock:  # resolved, they join the session's messages now
                self._fold_resolved(entry)
            return (messages + resolved)[-limit:]

        return read

    def append(
        self,
        attribution: Attribution,
        resolve: Callable[[], Sequence[Message]],
        exchange_id: str | None = None,
    ) -> None:
        """Add a completed call's messages (resolved when first needed), if the session is
        cached; otherwise the next read loads it from the store. ``exchange_id``: the id
        its exchange will be stored with (for :attr:`latest`)."""
        key = self.key(attribution)
        if self._known is not None:
            self._known.add(key)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._fold_resolved(entry)
                entry.pending.append(_Pending(resolve, exchange_id))

    def _fold_resolved(self, entry: _Entry) -> None:
        """Move the pending calls already resolved at the head of ``entry.pending`` into its
        messages, in one step: a snapshot never sees a call in neither, and a session only
        ever snapshotted keeps few pending calls. Holds ``self._lock``; formats nothing.
        Copy-on-write: a list handed out by get() is never changed under its reader."""
        done = 0
        added: list[Message] = []
        for item in entry.pending:
            resolved = item.resolved
            if resolved is None:
                break
            added.extend(resolved)
            done += 1
        if done:
            entry.messages = (entry.messages + added)[-self._max_messages :]
            entry.pending = entry.pending[done:]

    def drop(self, *, entity_id: str | None = None) -> None:
        """Forget cached sessions (of one entity, or all)."""
        with self._lock:
            for key in [k for k in self._entries if entity_id is None or k[0] == entity_id]:
                del self._entries[key]

    def close(self) -> None:
        """Stop the reader threads (a read in progress is abandoned)."""
        self._readers.shutdown()
        self._checkers.shutdown()


def _resolved(pending: Sequence[_Pending]) -> list[Message]:
    """The messages of calls pending in a session's history, in order (a call that cannot
    be read is left out)."""
    added: list[Message] = []
    for item in pending:
        added.extend(item.messages())
    return added


def request_budget(request: InjectionRequest, budget: HistoryBudget) -> HistoryBudget:
    """``budget``, or :data:`NO_HISTORY` for a request no history may go into."""
    return budget if request.history else NO_HISTORY
