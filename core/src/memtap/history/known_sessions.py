"""Which sessions the store has: what lets a brand-new session's first call skip the store.

Why: on the first call of a session the history cache is empty, and reading the store to
find out that there is nothing to read cost ~6 ms per call on the request path (more on a
remote database, forever on a frozen one). :class:`KnownSessions` is the set of sessions
the store had when this process started (read once, in the background, through
:meth:`memtap.storage.store.Store.session_keys`), plus every session this process has since
captured a call of. A session outside it is new: its call does not wait for a read.

Several processes may share a store (PostgreSQL, the proxy's workers): a session another
process created after the set was read is not in it. So "new" means "do not wait", not "do
not read": the session is still read in the background (except on a store no other process
can write to, such as a DuckDB file: there a session outside the set does not exist, and
nothing is read for it), and its history reaches the next
call — one call late, the price of never waiting on the store for a session that almost
always has nothing stored. (A periodically refreshed set would narrow that window at the
cost of re-reading every session key; a tight read deadline on every new session would put
the read back on the request path.)

Sessions are kept as 64-bit hashes (8 bytes each in a sorted array, ~8 MB for a million
sessions; this process's own new sessions are merged in, in the background, in batches); a
hash collision only makes a new session wait for its read, as if it were known.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable

log = logging.getLogger("memtap.history.injector")

#: Seconds before a failed read of the session keys is tried again.
RETRY_AFTER = 30.0
#: Sessions added by this process that are merged into the sorted array at once (at least).
MERGE_BATCH = 4096

SessionKey = tuple[str, str]


class KnownSessions:
    """The set of ``(entity_id, session_id)`` the store is known to have.

    ``read`` lists the store's sessions (``None``: the store cannot; every session is then
    "maybe known"). :meth:`start` reads them in a background thread; until that is done
    (or when it failed) :meth:`knows` answers ``None``.
    """

    def __init__(self, read: Callable[[], Iterable[SessionKey]] | None, *, exclusive: bool = False) -> None:
        self._read = read
        #: No other process writes to the store, and every write in this one is reported
        #: through :meth:`add` (the store's ``watch_sessions``, see
        #: :class:`memtap.storage.store.Store`): once the store's sessions are read, a session
        #: outside the set does not exist.
        self.exclusive = exclusive
        self._loaded: array[int] = array("q")
        self._added: set[int] = set()
        self._ready = False
        self._loading = False
        self._merging = False
        self._closed = False
        self._retry_at = 0.0
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        """Whether the store's sessions have been read."""
        return self._ready

    def start(self) -> None:
        """Read the store's sessions in a background thread (once; again after a failure,
        at most every :data:`RETRY_AFTER` seconds)."""
        if self._read is None or self._ready or self._closed:
            return
        with self._lock:
            if self._loading or self._ready or time.monotonic() < self._retry_at:
                return
            self._loading = True
        threading.Thread(target=self._load, name="memtap-sessions", daemon=True).start()

    def _load(self) -> None:
        assert self._read is not None
        try:
            hashes = array("q", sorted({hash(key) for key in self._read()}))
        except Exception as exc:
            if self._closed:  # the store was closed under the read: nothing to report
                return
            log.warning(
                "memtap could not list the store's sessions (%s); first calls of sessions wait "
                "a bounded time for their history meanwhile (retried in %.0f s)",
                exc,
                RETRY_AFTER,
            )
            with self._lock:
                self._loading = False
                self._retry_at = time.monotonic() + RETRY_AFTER
            return
        with self._lock:
            # Sessions merged in while the store was being read stay known.
            self._loaded = array("q", _unique(heapq.merge(self._loaded, hashes)))
            self._ready = True
            self._loading = False

    def knows(self, key: SessionKey) -> bool | None:
        """Whether the store has the session: ``True`` (it has, or may have: a hash
        collision), ``False`` (it had not when read, nor since in this process), or
        ``None`` (not read yet, or the store cannot list its sessions)."""
        if self._has(hash(key)):
            return True
        if not self._ready:
            self.start()
            return None
        return False

    def close(self) -> None:
        """The store is closing: a read in progress ends quietly, none starts again."""
        self._closed = True

    def _has(self, h: int) -> bool:
        if h in self._added:
            return True
        loaded = self._loaded
        i = bisect_left(loaded, h)
        return i < len(loaded) and loaded[i] == h

    def add(self, key: SessionKey) -> None:
        """The session has (or is about to have) stored history."""
        h = hash(key)
        if self._has(h):  # every call of a session says so: only a new one is added
            return
        self._added.add(h)
        if len(self._added) >= max(MERGE_BATCH, len(self._loaded) // 8) and not self._merging:
            with self._lock:
                if self._merging:
                    return
                self._merging = True
            threading.Thread(target=self._merge, name="memtap-sessions", daemon=True).start()

    def _merge(self) -> None:
        """Move the sessions added so far into the sorted array (8 bytes each instead of a
        set entry's ~70)."""
        try:
            batch = sorted(set(self._added))
            with self._lock:
                loaded = self._loaded
            merged = array("q", _unique(heapq.merge(loaded, batch)))
            with self._lock:
                if self._loaded is loaded:  # not replaced by a (re)load meanwhile
                    self._loaded = merged
                    self._added.difference_update(batch)
        finally:
            self._merging = False


def _unique(hashes: Iterable[int]) -> Iterable[int]:
    """Sorted ``hashes`` without repeats."""
    last: int | None = None
    for h in hashes:
        if h != last:
            yield h
            last = h
