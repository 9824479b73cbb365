"""Recall: an LRU of per-entity indexes kept current on writes, background embedding of
facts, and hybrid search with an optional deadline.

Why in process: a store's own full-text index (DuckDB's FTS) must be rebuilt after every
write, and vector search through SQL costs ~100 ms at 100k facts. Instead each
:class:`memtap.Memory` keeps the indexes of recently used entities in memory
(:class:`FactIndexes`): loaded once from the store (in the background on the request
path), then updated incrementally by this process's writes. Facts written by another
process appear at once on a store with a change feed (:mod:`memtap.storage.changes`: the entity's
index is reloaded in the background, the old one serving meanwhile); on any store, when
the entity's index is refreshed: ``refresh_after`` seconds after it
was loaded, or later for a large entity (its reload may take at most ``refresh_share`` of
the time: a 100k-fact entity that took 8 s to load is reloaded every ~13 minutes, not
every minute; and all refreshes together at most that share too), in the background while
the stale index serves; or when it is evicted.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import logging
import math
import os
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import attrs

from memtap.history.injector import LOAD_DEADLINE, may_wait, without_waiting
from memtap.longterm.index import (
    HIDDEN_KINDS,
    EntityIndex,
    Fusion,
    IndexedFact,
    PreparedVectors,
    ScoreParts,
    embedding_text,
    prepare_facts,
    prepare_vectors,
)
from memtap.longterm.reuse import VectorReuse, is_answer
from memtap.longterm.roles import asks_assistant
from memtap.longterm.temporal import TimeWindow, asks_present, query_window
from memtap.longterm.text import term_counts
from memtap.metrics import count
from memtap.protocol.embedder import Embedder
from memtap.protocol.model import Fact, ScoredFact, aware, utcnow
from memtap.storage.store import Store
from memtap.workers.background import DaemonPool, LazyThread, calls_in_flight, lower_priority, quiet_for
from memtap.workers.native import InterpreterExiting, native_work
from memtap.workers.pending import PendingWork

log = logging.getLogger("memtap.longterm.recall")


#: Seconds a call waits at most for its entity's fact index still loading (a new process's
#: first call; the load starts at the first ``scope``/``register``), as history waits for
#: its session's read (:data:`memtap.history.injector.LOAD_DEADLINE`).
COLD_INDEX_WAIT = LOAD_DEADLINE

_T = TypeVar("_T")


@attrs.define
class RecallStats:
    """Counters of recall since the Memory started (see :attr:`RecallEngine.stats`)."""

    searches: int = 0
    cold_skips: int = 0
    lexical_only: int = 0
    embed_timeouts: int = 0
    embed_failures: int = 0
    load_failures: int = 0
    facts_embedded: int = 0
    index_loads: int = 0
    #: Searches that used the embedder's quick query vector.
    quick_queries: int = 0
    #: Of those, searches whose best hit was weak, so the full model was asked too.
    escalations: int = 0
    #: Request-path searches made without the full model because it was still loading.
    model_loading: int = 0
    #: Searches answered by the entity's memo of the same search (its facts unchanged).
    memo_hits: int = 0
    #: Escalations answered without the full model because it had no vector ready within
    #: the request's ``model_wait`` (it is made in the background for the next time).
    model_deferred: int = 0
    #: Facts given a quick vector on being indexed (findable by meaning at once).
    facts_quick: int = 0
    #: Facts waiting for the full model (a gauge, read when the stats are).
    vectors_pending: int = 0
    #: Facts given a vector the full model had made already (the same text, or the user
    #: turn an answer restates: :mod:`memtap.longterm.reuse`), not embedded again.
    vectors_reused: int = 0
    #: Escalations answered without the full model, not even waited for, because queries
    #: asked it for more than it can make without making calls wait
    #: (:meth:`QueryVectors.overloaded`); counted in :attr:`model_deferred` too.
    model_shed: int = 0
    #: Request-path searches that a background change of the entity's index (new facts,
    #: vectors) held up past their deadline: they went without recalled facts, or with the
    #: quick vector's when the index was taken while the full model answered.
    busy_skips: int = 0
    #: Times a search found the entity's index taken by a background change and waited
    #: for it (up to its deadline), and how long those waits took in all (seconds).
    index_waits: int = 0
    index_wait_seconds: float = 0.0


class _IndexBusy(Exception):
    """A search with a deadline could not read the entity's index within it (a background
    change held it): the call goes on without recalled facts."""


class _Held:
    """``entry.lock`` held for a search: waited for at most until ``until``
    (``time.monotonic()``; ``None``: as long as it takes), else :class:`_IndexBusy`; a
    wait is counted in ``stats``."""

    __slots__ = ("_lock", "_stats", "_until")

    def __init__(self, lock: threading.Lock, until: float | None, stats: RecallStats) -> None:
        self._lock = lock
        self._until = until
        self._stats = stats

    def __enter__(self) -> None:
        if self._lock.acquire(blocking=False):
            return
        started = time.monotonic()
        if self._until is None:
            got = self._lock.acquire()
        else:
            got = self._lock.acquire(timeout=max(0.0, self._until - started))
        self._stats.index_waits += 1
        self._stats.index_wait_seconds += time.monotonic() - started
        if not got:
            raise _IndexBusy

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _indexable(store: Store, entity_id: str, model: str | None) -> list[tuple[Fact, Any]]:
    """The entity's current facts with their stored vectors, oldest first; stores without
    ``indexable_facts`` give facts only (vectors are then made again in the background)."""
    reader = getattr(store, "indexable_facts", None)
    if reader is not None:
        return list(reader(entity_id=entity_id, model=model))
    return [(f, None) for f in reversed(store.facts(entity_id=entity_id))]


class _Entry:
    __slots__ = (
        "error",
        "generation",
        "index",
        "load_seconds",
        "loaded_at",
        "loading",
        "lock",
        "memo",
        "pending",
        "ready",
        "reload",
    )

    def __init__(self, generation: int) -> None:
        self.index: EntityIndex | None = None
        self.loading = False
        self.loaded_at = 0.0
        #: How long the last load took (what a refresh will cost).
        self.load_seconds = 0.0
        self.pending: list[Callable[[EntityIndex], None]] = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.generation = generation
        self.error: BaseException | None = None
        #: Load again when the load in progress is done (it may have read the store
        #: before a change it was asked to pick up).
        self.reload = False
        #: Recent searches' answers (:class:`_Memo`), by what was asked.
        self.memo: OrderedDict[tuple[Any, ...], _Memo] = OrderedDict()


@attrs.frozen
class _Memo:
    """A search's answer, valid while the index it came from is unchanged: an agent's tool
    loop asks the same question on every request of a turn."""

    index: EntityIndex
    version: int
    hits: tuple[ScoredFact, ...]
    parts: dict[str, ScoreParts] | None
    below: tuple[ScoredFact, ...] | None


class FactIndexes:
    """A bounded LRU of :class:`EntityIndex` objects, one per entity, loaded from ``store``.

    ``model`` names the embedder whose stored vectors are loaded; ``on_unembedded``
    receives the facts a loaded index has no vector for. An entry is reloaded (refreshed)
    ``refresh_after`` seconds after its last load, or after ``load time / refresh_share``
    seconds if that is longer, so that refreshing costs at most that share of a core; and
    the refreshes of all entries together take at most that share of the time (banked over
    :attr:`REFRESH_WINDOW` seconds), so that many large entities in use do not keep a core
    reloading them (200 entities whose loads take 1.4 s each, refreshed every 140 s: two
    cores). A refresh asked for (:meth:`refresh`, a store's change feed) is not limited.
    """

    #: Seconds over which refreshes may bank their share of the time (what a burst of
    #: them may spend after a quiet spell: ``refresh_share`` times this).
    REFRESH_WINDOW = 60.0

    def __init__(
        self,
        store: Store,
        *,
        model: str | None,
        fusion: Fusion | None = None,
        max_entities: int = 256,
        refresh_after: float | None = 60.0,
        refresh_share: float = 0.01,
        on_unembedded: Callable[[list[Fact]], None] | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.fusion = fusion or Fusion()
        self.max_entities = max_entities
        self.refresh_after = refresh_after
        self.refresh_share = refresh_share
        self.on_unembedded = on_unembedded
        self.stats = RecallStats()
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._generation = 0
        # Daemon threads: a load stuck on a frozen store must not hang the process's exit.
        self._loader = DaemonPool(1, "memtap-index")
        self._closed = False
        #: Seconds of loading the refreshes may still spend (:meth:`_may_refresh`).
        self._refresh_credit = refresh_share * self.REFRESH_WINDOW
        self._credited_at = time.monotonic()

    def get(self, entity_id: str, *, wait: bool, cold_wait: float = 0.0) -> _Entry | None:
        """The entity's loaded entry. ``wait=False`` (the request path) starts a
        background load and, when the entity is cold, waits ``cold_wait`` seconds at most
        for it (``None`` if it is not loaded by then); ``wait=True`` loads in this thread
        if needed. A stale entry is served while it is refreshed."""
        with self._lock:
            entry = self._entries.get(entity_id)
            if entry is None:
                self._generation += 1
                entry = self._entries[entity_id] = _Entry(self._generation)
                while len(self._entries) > self.max_entities:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(entity_id)
            start = not entry.loading and (
                entry.index is None or (self._stale(entry) and self._may_refresh(entry.load_seconds))
            )
            if start:
                entry.loading = True
                if entry.index is None:
                    entry.ready.clear()
        if start:
            if wait and entry.index is None:
                self._load(entity_id, entry)
            else:
                try:
                    self._loader.submit(self._load, entity_id, entry)
                except RuntimeError:  # shut down
                    entry.loading = False
                    return None
        if entry.index is None and wait:
            entry.ready.wait()
            if entry.error is not None:
                raise entry.error
        elif entry.index is None and cold_wait > 0:
            entry.ready.wait(cold_wait)  # a new process's first call: its fact index is loading
        return entry if entry.index is not None else None

    def wait_loaded(self, entity_id: str, timeout: float) -> bool:
        """Whether the entity's index is loaded, waiting at most ``timeout`` seconds (a cold
        one starts loading in the background): for callers that may wait a little for
        recall by words, never for the whole load (a page of the UI)."""
        if self.get(entity_id, wait=False) is not None:
            return True
        with self._lock:
            entry = self._entries.get(entity_id)
        return entry is not None and entry.ready.wait(timeout) and entry.index is not None

    def _stale(self, entry: _Entry) -> bool:
        if self.refresh_after is None:
            return False
        interval = self.refresh_after
        if self.refresh_share > 0:
            interval = max(interval, entry.load_seconds / self.refresh_share)
        return time.monotonic() - entry.loaded_at > interval

    def _may_refresh(self, cost: float) -> bool:
        """Whether the refreshes' share of the time has room for one more, which is then
        charged ``cost`` seconds (what the entry's last load took). Called under the lock."""
        if self.refresh_share <= 0:
            return True
        now = time.monotonic()
        earned = (now - self._credited_at) * self.refresh_share
        self._refresh_credit = min(self.refresh_share * self.REFRESH_WINDOW, self._refresh_credit + earned)
        self._credited_at = now
        if self._refresh_credit <= 0:
            return False
        # May go below zero: a load longer than the bank is paid back before the next.
        self._refresh_credit -= cost
        return True

    def _load(self, entity_id: str, entry: _Entry) -> None:
        started = time.monotonic()
        try:
            rows = _indexable(self.store, entity_id, self.model)
            index = EntityIndex(self.fusion)
            vectors = {f.id: v for f, v in rows if v is not None}
            index.add((f for f, _ in rows), None)
            if vectors:
                index.set_vectors(vectors, self.model)
            self._carry_vectors(entry, index)
            with entry.lock:
                for update in entry.pending:
                    update(index)
                entry.pending.clear()
                entry.index = index
                entry.memo.clear()  # answers of the index replaced
                entry.loaded_at = time.monotonic()
                entry.load_seconds = entry.loaded_at - started
                entry.error = None
            self.stats.index_loads += 1
            missing = index.missing_vectors() if self.on_unembedded is not None else []
            if missing and self.on_unembedded is not None:
                self.on_unembedded(missing)
        except BaseException as exc:
            self.stats.load_failures += 1
            count("failed", reason="recall_load")
            entry.error = exc
            # A load that memtap's own close() cut short (its store closed under it) is
            # no failure: an application that exits right after starting logs nothing.
            log.log(
                logging.DEBUG if self._closed else logging.WARNING,
                "memtap could not load the facts of %r for recall: %s",
                entity_id,
                exc,
            )
            with self._lock:
                if entry.index is None and self._entries.get(entity_id) is entry:
                    del self._entries[entity_id]  # retried on the next call
        finally:
            with self._lock:
                again = entry.reload and entry.index is not None and self._entries.get(entity_id) is entry
                entry.reload = False
                entry.loading = again
            entry.ready.set()
            if again:
                self._submit(entity_id, entry)

    @staticmethod
    def _carry_vectors(entry: _Entry, index: EntityIndex) -> None:
        """A reloaded index keeps the vectors the one it replaces had and the store has not
        (quick ones, full ones not stored yet): a reload must not make facts unfindable by
        meaning until the embedder catches up again."""
        full: dict[str, Any] = {}
        quick: dict[str, Any] = {}
        with entry.lock:
            old = entry.index
            if old is None or not index.unembedded:
                return
            for fact in index.missing_vectors():
                vec = old.vector_of(fact.id, full=True)
                if vec is not None:
                    full[fact.id] = vec.copy()
                elif (vec := old.vector_of(fact.id)) is not None:
                    quick[fact.id] = vec.copy()
        index.set_vectors(full, old.model)
        index.set_vectors(quick, old.model, quick=True)

    def _submit(self, entity_id: str, entry: _Entry) -> None:
        try:
            self._loader.submit(self._load, entity_id, entry)
        except RuntimeError:  # shut down
            entry.loading = False

    def refresh(self, entity_id: str | None = None) -> None:
        """Reload the entity's cached index (every cached one without ``entity_id``) in
        the background, because another process changed its facts: the current index
        serves until the new one replaces it (a search never finds the entity cold), and a
        load already under way is followed by another."""
        started: list[tuple[str, _Entry]] = []
        with self._lock:
            if entity_id is None:
                targets = list(self._entries.items())
            else:
                found = self._entries.get(entity_id)
                targets = [(entity_id, found)] if found is not None else []
            for key, entry in targets:
                if entry.loading:
                    entry.reload = True
                elif entry.index is not None:
                    entry.loading = True
                    started.append((key, entry))
        for key, entry in started:
            self._submit(key, entry)

    def update(self, entity_id: str, change: Callable[[EntityIndex], None]) -> None:
        """Apply ``change`` to the entity's index if it is cached (and to the one being
        loaded, once it is); an uncached entity reads the change from the store later."""
        self.update_with(entity_id, lambda: None, lambda index, _: change(index))

    def update_with(
        self, entity_id: str, prepare: Callable[[], _T], change: Callable[[EntityIndex, _T], object]
    ) -> None:
        """:meth:`update` with ``change(index, prepare())``: ``prepare`` (what the change
        reads of its facts and vectors) runs only for a cached entity, and before its index
        is taken, so that a search waiting for the index waits only for the change."""
        with self._lock:
            entry = self._entries.get(entity_id)
        if entry is None:
            return
        prepared = prepare()

        def apply(index: EntityIndex) -> None:
            change(index, prepared)

        with entry.lock:
            if entry.loading:
                entry.pending.append(apply)
            if entry.index is not None:
                apply(entry.index)
                if entry.index.needs_compaction():
                    entry.loaded_at = -math.inf  # reloaded (compacted) in the background next time

    def take_in(self, entity_id: str, fact_ids: Sequence[str]) -> None:
        """Another process stored these facts of the entity: add them to its cached index
        (read by id, in the background; an uncached entity reads them when it loads). A
        store that cannot read facts by id (``indexable_facts_by_id``), or a change that
        does not name them, reloads the entity instead (:meth:`refresh`)."""
        reader = getattr(self.store, "indexable_facts_by_id", None)
        if not fact_ids or reader is None:
            self.refresh(entity_id)
            return
        with self._lock:
            if entity_id not in self._entries:
                return
        try:
            self._loader.submit(self._take_in, entity_id, list(fact_ids), reader)
        except RuntimeError:  # shut down
            pass

    def _take_in(self, entity_id: str, fact_ids: list[str], reader: Callable[..., Any]) -> None:
        try:
            rows = list(reader(entity_id=entity_id, ids=fact_ids, model=self.model))
        except Exception as exc:
            log.warning(
                "memtap could not read another process's new facts of %r (%s); reloading", entity_id, exc
            )
            self.refresh(entity_id)
            return
        facts = [f for f, _ in rows]
        vectors = {f.id: v for f, v in rows if v is not None}
        model = self.model

        def prepare() -> tuple[list[IndexedFact], PreparedVectors | None]:
            return prepare_facts(facts, self.fusion), prepare_vectors(vectors)

        def change(index: EntityIndex, prepared: tuple[list[IndexedFact], PreparedVectors | None]) -> None:
            index.add_prepared(prepared[0])
            index.replace_context(facts)  # a known fact named again: its context changed
            if prepared[1] is not None:
                index.set_prepared_vectors(prepared[1], model)

        self.update_with(entity_id, prepare, change)
        missing = [f for f in facts if f.id not in vectors and f.kind not in HIDDEN_KINDS]
        if missing and self.on_unembedded is not None:
            self.on_unembedded(missing)

    def drop(self, entity_id: str | None = None) -> None:
        """Forget cached indexes (of one entity, or all)."""
        with self._lock:
            for key in [k for k in self._entries if entity_id is None or k == entity_id]:
                entry = self._entries.pop(key)
                with entry.lock:
                    entry.pending.clear()

    def close(self) -> None:
        """Stop the loader thread."""
        self._closed = True
        self._loader.shutdown()


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS says, else all)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


class EmbeddingWorker:
    """Embeds stored facts in the background; stores the vectors (when the store can) and
    hands them to the indexes. A failing embedder is logged once per outage and counted;
    the facts stay recallable lexically and are embedded again when their index is next
    loaded.

    Two passes, so that a fact is findable by meaning as soon as it is indexed while the
    full model never competes with a query (issue 37):

    - with ``quick`` (the embedder's cheap approximation, ~50 µs a text), every fact gets a
      quick vector as it is submitted, in the submitting thread, for the indexes only (it
      is not stored: the full model's is); one submitted while the quick path had none
      (its table still loading) gets it as soon as the path has some, wherever the fact
      is (:meth:`_quick_blind`);
    - the full model then embeds them ``step`` at a time (a few tens of ms of one core), and
      before each step waits while ``lane_busy()`` says a call waits for a query's vector
      (at most :attr:`YIELD_AT_MOST` seconds a step, so a process that queries without
      pause still gets its documents embedded). A query's vector is what a call waits
      for; a document's, nobody. A text the model embedded lately (a document's or a
      query's: ``known``), and an answer that restates its exchange's user turn, take the
      vector made already (:mod:`memtap.longterm.reuse`: :attr:`RecallStats.vectors_reused`).

    While the process is quiet (no intercepted call running or started, and no fact
    submitted, for :attr:`QUIET_AFTER` seconds: what a bulk import or a loop of
    ``remember`` calls left behind) a backlog is embedded over ``cores`` threads,
    :attr:`QUIET_STEPS` steps at once: the model then runs at its rate on every core, and
    nothing waits behind it. While facts keep coming, the app's own work needs the other
    core (a loop of 50,000 ``remember`` calls slowed from 175 to 130 a second when the
    model took both), unless someone waits for the backlog in :meth:`flush` and no call
    runs (a process's last calls, flushed before it exits: every core at once, not half a
    second later)."""

    #: The longest a step waits for the query lane to be free (seconds).
    YIELD_AT_MOST = 0.05
    #: Vectors are stored this many at a time, or when the queue runs empty: a store's
    #: write per step cost about half of what the model did (DuckDB: a transaction per
    #: four vectors), and the indexes have the vectors from the step on.
    STORE_EVERY = 64
    #: Seconds without a call after which the worker may use every core (see above).
    QUIET_AFTER = 0.5
    #: How many steps one round takes while the process is quiet.
    QUIET_STEPS = 4
    #: How many facts submitted without a quick vector the worker tries again before each
    #: step, until one gets one (:meth:`_retry_blind`).
    QUICK_TRIES = 4

    def __init__(
        self,
        embedder: Embedder,
        store: Store,
        deliver: Callable[[str, dict[str, Any], bool], None],
        stats: RecallStats,
        *,
        step: int = 4,
        skip: Callable[[Fact], bool] | None = None,
        quick: Callable[[str], Any] | None = None,
        lane_busy: Callable[[], bool] | None = None,
        cores: int | None = None,
        known: Callable[[str], Any] | None = None,
        learned: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.embedder = embedder
        #: Texts embedded in parallel while the process is quiet (default: the CPUs this
        #: process may use); 1 never does.
        self.cores = max(1, cores if cores is not None else _usable_cpus())
        self._helpers: DaemonPool | None = None
        self._last_submit = float("-inf")
        #: Callers waiting in :meth:`flush`: they wait for the backlog, which then takes
        #: every core whenever no call is running, facts coming or not.
        self._flushing = 0
        self._flushing_lock = threading.Lock()
        self.store = store
        self.deliver = deliver
        self.stats = stats
        self.step = max(1, step)
        self.skip = skip
        self.quick = quick
        self.lane_busy = lane_busy
        #: The full model's vector of a text made elsewhere (the query lane), or ``None``.
        self.known = known
        #: Told each user turn's vector the model made (a question asked again has it).
        self.learned = learned
        self._queue: queue.SimpleQueue[Fact | None] = queue.SimpleQueue()
        self._pending = PendingWork()
        self._thread = LazyThread(self._run, "memtap-embed")
        self._closed = False
        #: close() gave up waiting for the thread (a batch was still running).
        self._abandoned = False
        self._failing = False
        self._quick_failing = False
        self._reuse = VectorReuse()
        #: Vectors made and delivered to the indexes, not stored yet (:attr:`STORE_EVERY`).
        self._unstored: dict[str, Any] = {}
        #: Quick vectors of facts waiting for the full model (what :attr:`_reuse` compares).
        self._quick_of: dict[str, Any] = {}
        #: Facts the quick path had no vector for when they came (its table not loaded
        #: yet), by id, oldest first: the next submit that gets quick vectors gives them
        #: theirs, even while the worker waits for the model with them, and the worker
        #: tries a few before each step (:meth:`_quick_blind`, :meth:`_retry_blind`).
        self._blind: dict[str, Fact] = {}
        self._blind_lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Facts queued for the full model and not embedded yet."""
        return self._pending.count

    def submit(self, facts: Iterable[Fact]) -> None:
        """Give the facts their quick vectors, in this thread, and queue them to embed."""
        if self._closed:
            return
        facts = list(facts)
        self._last_submit = time.monotonic()
        # Here, not in the worker: its low priority made quick vectors lag by hundreds of
        # facts on a busy host (issue 37), and a quick vector costs 50-200 µs a fact.
        made, missed = self._quick_pass(facts)
        if made and self._blind:
            self._quick_blind()  # the quick path makes vectors now
        if missed:
            with self._blind_lock:
                self._blind.update((f.id, f) for f in missed)
        for fact in facts:
            self._pending.add()
            self._queue.put(fact)
        self.stats.vectors_pending = self._pending.count
        self._thread.start()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything queued is embedded by the full model (or failed); the
        backlog takes every core meanwhile unless a call is running."""
        with self._flushing_lock:
            self._flushing += 1
        try:
            return self._pending.wait(timeout)
        finally:
            with self._flushing_lock:
                self._flushing -= 1

    def close(self, timeout: float | None = 10.0) -> None:
        """Finish what is queued (up to ``timeout``), then stop: what is left is embedded
        again when its entity's index is next loaded."""
        self.flush(timeout)
        self._closed = True
        if self._helpers is not None:
            self._helpers.shutdown()
        thread = self._thread.started()
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
            # Still in a batch: interpreter exit waits for it (memtap.workers.native).
            self._abandoned = thread.is_alive()

    def _run(self) -> None:
        lower_priority()
        waiting: deque[Fact] = deque()
        while True:
            fresh, stop = self._take(block=not waiting)
            waiting.extend(fresh)
            if waiting and not stop and not self._closed:
                self._yield_to_queries()
                fresh, stop = self._take(block=False)
                waiting.extend(fresh)
            if self._blind and not stop:
                self._retry_blind()
            if stop:
                self._store_unstored()
                self._pending.done(len(waiting))
                return
            size = self.step * (self.QUIET_STEPS if self._parallel_now() else 1)
            batch = [waiting.popleft() for _ in range(min(size, len(waiting)))]
            if not batch:
                continue
            try:
                # One unit for interpreter exit to wait on: the model and the store are
                # native code, which a thread ended at exit aborts the process in.
                with native_work():
                    try:
                        if not self._closed:
                            self._embed(batch)
                    finally:
                        if not waiting or len(self._unstored) >= self.STORE_EVERY:
                            # Before the last fact is counted done: flush() finds them stored.
                            self._store_unstored()
            except InterpreterExiting:
                # The process is exiting: what is left is embedded at the next start.
                self._pending.done(len(waiting))
                waiting.clear()
                return
            finally:
                self._pending.done(len(batch))
                self.stats.vectors_pending = self._pending.count

    def _take(self, *, block: bool) -> tuple[list[Fact], bool]:
        """What is queued now (waiting for a first fact when ``block``), and whether to stop."""
        taken: list[Fact] = []
        while True:
            try:
                item = self._queue.get() if block and not taken else self._queue.get_nowait()
            except queue.Empty:
                return taken, False
            if item is None:
                return taken, True
            taken.append(item)

    def _deliver_full(self, facts: Sequence[Fact], vectors: Mapping[str, Any]) -> None:
        """Hand the full model's ``vectors`` of ``facts`` (those it has) to the indexes,
        and to the store with the next write."""
        self._unstored.update(vectors)
        by_entity: dict[str, dict[str, Any]] = {}
        for f in facts:
            if f.id in vectors:
                by_entity.setdefault(f.entity_id, {})[f.id] = vectors[f.id]
        if self._blind:
            with self._blind_lock:
                for f in facts:
                    self._blind.pop(f.id, None)
        for entity_id, vecs in by_entity.items():
            self.deliver(entity_id, vecs, False)

    def _yield_to_queries(self) -> None:
        if self.lane_busy is None:
            return
        until = time.monotonic() + self.YIELD_AT_MOST
        while self.lane_busy() and time.monotonic() < until:
            time.sleep(0.001)

    def _quick_pass(self, facts: list[Fact], *, keep: bool = True) -> tuple[int, list[Fact]]:
        """Give the facts a quick vector each, at once (indexes only); how many it made,
        and the facts the quick path had none for (its table not loaded yet, say).
        ``keep=False``: the vectors are not kept for the worker's reuse checks (facts it
        may have taken already)."""
        if self.quick is None or self._closed:
            return 0, []
        by_entity: dict[str, dict[str, Any]] = {}
        missed: list[Fact] = []
        try:
            for f in facts:
                if self.skip is not None and self.skip(f):
                    continue
                vec = self.quick(embedding_text(f))
                if vec is not None:
                    by_entity.setdefault(f.entity_id, {})[f.id] = vec
                    if keep:
                        self._quick_of[f.id] = vec
                else:
                    missed.append(f)
        except Exception as exc:  # the full model still embeds them
            if not self._quick_failing:
                log.warning("memtap's quick fact vectors failed (%s); facts wait for the full model", exc)
                self._quick_failing = True
            return 0, []
        made = 0
        for entity_id, vecs in by_entity.items():
            made += len(vecs)
            self.deliver(entity_id, vecs, True)
        self.stats.facts_quick += made
        return made, missed

    def _quick_blind(self) -> None:
        """The quick path makes vectors now: give them to the facts it had none for when
        they came, wherever they are (queued, or in a batch waiting for the model: in a
        new process the model's first batch may wait seconds for the model to load). A
        fact it still has none for never gets one (no word of its text is in the table)."""
        with self._blind_lock:
            facts = list(self._blind.values())
            self._blind.clear()
        self._quick_pass(facts, keep=False)

    def _retry_blind(self) -> None:
        """In the worker, before a step: whether the quick path makes vectors now, tried on
        the first few facts it had none for (a text of no word the table knows has none
        even then); if so, every such fact gets its own (:meth:`_quick_blind`). Until
        then they are findable by their words only, and a backlog's last fact reaches the
        full model minutes later (a busy process's first facts come before its quick
        table has loaded: issue 37). Those tried in vain go back last, so that the next
        try takes others."""
        with self._blind_lock:
            tried = [
                self._blind.pop(fact_id) for fact_id in list(itertools.islice(self._blind, self.QUICK_TRIES))
            ]
        made, missed = self._quick_pass(tried, keep=False)
        if made:
            self._quick_blind()
        elif missed:
            with self._blind_lock:
                self._blind.update((f.id, f) for f in missed)

    def _quick_of_now(self, fact: Fact, *, keep: bool = True) -> Any:
        """``fact``'s quick vector: the one it was given, else one made now (the quick
        table was not ready when it arrived; reuse compares quick vectors), else ``None``."""
        vec = self._quick_of.get(fact.id) if keep else self._quick_of.pop(fact.id, None)
        if vec is not None or self.quick is None or self._quick_failing:
            return vec
        try:
            return self.quick(embedding_text(fact))
        except Exception:
            return None  # _quick_pass logs a failing quick path

    def _embed(self, batch: list[Fact]) -> None:
        quick = {f.id: self._quick_of_now(f, keep=False) for f in batch}
        if self.skip is not None:
            batch = [f for f in batch if not self.skip(f)]
            if not batch:
                return
        try:
            vectors: dict[str, Any] = {}
            # The user's turns first: an answer that restates one then takes its vector.
            for group in ([f for f in batch if not is_answer(f)], [f for f in batch if is_answer(f)]):
                self._embed_group(group, quick, vectors)
        except InterpreterExiting:
            raise
        except Exception as exc:
            self.stats.embed_failures += 1
            count("failed", reason="embed")
            if not self._failing:
                log.error(
                    "memtap's embedder %r failed (%s); facts stay recallable by words",
                    self.embedder.name,
                    exc,
                )
                self._failing = True
            return
        self._failing = False
        self._deliver_full(batch, vectors)

    def _store_unstored(self) -> None:
        vectors, self._unstored = self._unstored, {}
        self.store_vectors(vectors)

    def _embed_group(self, group: list[Fact], quick: Mapping[str, Any], vectors: dict[str, Any]) -> None:
        """Vectors of ``group`` into ``vectors``: known ones reused, each other text
        embedded once."""
        todo: dict[str, list[Fact]] = {}
        for f in group:
            text = embedding_text(f)
            known = self._reuse.known(f, text, quick.get(f.id))
            if known is None and self.known is not None:
                known = self.known(text)  # the query lane embedded it (the turn was its question)
            if known is not None:
                vectors[f.id] = known
                self.stats.vectors_reused += 1
            else:
                todo.setdefault(text, []).append(f)
        if not todo:
            return
        rows = self._embed_texts(list(todo))
        for (text, facts), row in zip(todo.items(), rows):
            self.stats.facts_embedded += 1
            self.stats.vectors_reused += len(facts) - 1
            for f in facts:
                vectors[f.id] = row
                q = quick.get(f.id)
                self._reuse.learn(f, text, q if q is not None else self._quick_of_now(f), row)
            if self.learned is not None and not any(is_answer(f) for f in facts):
                self.learned(text, row)

    def _parallel_now(self) -> bool:
        """Whether to embed over every core now: no call runs, and someone waits in
        :meth:`flush` or nothing happened for :attr:`QUIET_AFTER` seconds."""
        if self.cores <= 1:
            return False
        if self._flushing:
            return not calls_in_flight()
        return time.monotonic() - self._last_submit >= self.QUIET_AFTER and quiet_for(self.QUIET_AFTER)

    def _embed_texts(self, texts: list[str]) -> Any:
        """The model's rows for ``texts``: split over :attr:`cores` threads (this one and
        low-priority helpers) while the process is quiet, else in this thread."""
        if len(texts) < 2 or self._closed or not self._parallel_now():
            return self.embedder.embed(texts)
        if self._helpers is None:
            self._helpers = DaemonPool(self.cores - 1, "memtap-embed-helper", low_priority=True)
        parts = min(self.cores, len(texts))
        cut = [len(texts) * i // parts for i in range(parts + 1)]
        shares = [texts[cut[i] : cut[i + 1]] for i in range(parts)]
        helped = [self._help(share) for share in shares[1:]]
        rows = list(self.embedder.embed(shares[0]))
        for future, share in zip(helped, shares[1:]):
            try:
                part = future.result() if future is not None else None
            except CancelledError:
                part = None
            # None: close() shut the helpers down before they began; this thread does it.
            rows.extend(self.embedder.embed(share) if part is None else part)
        return rows

    def _help(self, texts: list[str]) -> Future[Any] | None:
        """A helper's future of ``texts``' rows; ``None`` once close() shut the helpers."""
        assert self._helpers is not None
        try:
            return self._helpers.submit(self._embed_unit, texts)
        except RuntimeError:
            return None

    def _embed_unit(self, texts: list[str]) -> Any:
        """A helper thread's share of :meth:`_embed_texts`, as a unit of native work."""
        with native_work():
            return self.embedder.embed(texts)

    def store_vectors(self, vectors: Mapping[str, Any]) -> None:
        """Persist vectors when the store can (failures are logged: memory still has them)."""
        setter = getattr(self.store, "set_embeddings", None)
        if setter is None or not vectors:
            return
        if self._abandoned:
            # close() stopped waiting for this batch: the store may be closed too, and
            # these facts are embedded again at their index's next load.
            log.debug("memtap: %d fact vectors made after close are not stored", len(vectors))
            return
        try:
            setter(vectors, model=self.embedder.name)
        except Exception:
            log.warning("memtap could not store fact embeddings (kept in memory only)", exc_info=True)


class QueryVectors:
    """Query embeddings: the embedder's quick path when it has one (:meth:`quick`, in the
    calling thread), and the full model with a deadline (:meth:`vector`: one lane, an LRU
    of recent queries).

    The lane never makes a queue: at most one query is embedded and one waits; a newer
    query takes the waiting one's place (its callers' deadlines have passed, or soon
    will: a 6 ms embedding behind a queue of them is what made recall's cost grow with
    load). A query whose caller stopped waiting is still embedded, into the LRU, so the
    same question asked again (an agent's next request of the turn) has it.

    An embedder with a ``warm_up()`` method (loading its model) is warmed up in a
    background thread (:meth:`warm_up`, started by the first search or by registering a
    client): until that is done a query with a deadline does not wait for the model, which
    would put its loading (a second or more) on the request path.

    Under sustained load the lane is not asked at all (:meth:`overloaded`): when calls ask
    the full model for their questions faster than it makes them (more than
    :attr:`MAX_DEMAND` of a core over the last :attr:`DEMAND_WINDOW` seconds, at the cost a
    query embedding has had lately), waiting for it would make every call's latency that
    of the model under contention (10-20 ms on a loaded 2-core machine, issue 37), and
    embedding every question for a next time that does not come would take the cores the
    calls need. A question asked again meanwhile (an agent's tool loop) is embedded then,
    in the background, for its following requests."""

    #: Over how many seconds the demand on the full model is measured.
    DEMAND_WINDOW = 1.0
    #: The share of one core the full model may be asked for (queries per second times the
    #: cost of one) before calls stop waiting for it (:meth:`overloaded`).
    MAX_DEMAND = 0.25
    #: What a query embedding is assumed to cost (seconds) until one has been timed.
    INITIAL_COST = 0.006

    def __init__(self, embedder: Embedder, *, cache_size: int = 512) -> None:
        self.embedder = embedder
        quick = getattr(embedder, "quick_query", None)
        self._quick: Callable[[str], Any] | None = quick if callable(quick) else None
        self._quick_failing = False
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memtap-query")
        #: Calls waiting for a query's vector now (documents then wait: :meth:`busy`).
        self._waiters = 0
        #: Queries on the lane (embedding or waiting to), by text.
        self._lane: OrderedDict[str, Future[Any]] = OrderedDict()
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size
        #: Quick vectors by text: a tool loop asks the same question on every request of
        #: a turn, while its facts change (so the search is made again).
        self._quick_cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        load = getattr(embedder, "warm_up", None)
        self._load: Callable[[], Any] | None = load if callable(load) else None
        self._warming: threading.Thread | None = None
        #: Set when the warm-up has finished (successfully or not); set at once for an
        #: embedder without ``warm_up``.
        self.warmed = threading.Event()
        self._warm_ok = self._load is None
        if self._load is None:
            self.warmed.set()
        #: When recent calls asked the full model for a question's vector (monotonic).
        self._asks: deque[float] = deque()
        #: What one query embedding has cost lately (seconds of wall time, on the lane).
        self.cost = self.INITIAL_COST
        #: Questions answered without the full model under load (a repeat is embedded).
        self._shed: OrderedDict[str, None] = OrderedDict()

    def warm_up(self, *, wait: bool = False, timeout: float | None = None) -> bool:
        """Start loading the embedder's model in the background (once); with ``wait``,
        wait for it (up to ``timeout``). ``True`` when the model is loaded."""
        if not self.warmed.is_set() and self._warming is None:
            with self._lock:
                if self._warming is None:
                    # Not a daemon: the interpreter waits for it at exit (the load is
                    # bounded: a few seconds), because a native model left loading while
                    # the process exits aborts it (onnxruntime: "terminate called").
                    self._warming = threading.Thread(
                        target=self._warm, name="memtap-embedder-warm-up", daemon=False
                    )
                    self._warming.start()
        if wait:
            self.warmed.wait(timeout)
        return self.warmed.is_set() and self._warm_ok

    def _warm(self) -> None:
        # Normal priority: the loading is short, and a thread holding the GIL must not be
        # the one the OS schedules last (the request threads would wait for it).
        assert self._load is not None
        try:
            self._load()
            self._warm_ok = True
        except Exception as exc:
            log.warning(
                "memtap could not load the embedder %r (%s); recall uses words until it can",
                self.embedder.name,
                exc,
            )
        finally:
            self.warmed.set()

    @property
    def loading(self) -> bool:
        """Whether the embedder's model is being loaded (queries with a deadline then go
        without it)."""
        return not self.warmed.is_set()

    def quick_vector(self, text: str) -> Any:
        """The embedder's quick vector for a document's ``text`` (not cached: documents do
        not repeat), or ``None`` (no quick path, or not ready)."""
        return self._quick(text) if self._quick is not None else None

    def quick(self, text: str) -> Any:
        """The embedder's quick vector for ``text``, or ``None`` (no quick path, not ready,
        or failing: logged once). Vectors are cached by text."""
        if self._quick is None:
            return None
        with self._lock:
            vec = self._quick_cache.get(text)
            if vec is not None:
                self._quick_cache.move_to_end(text)
                return vec
        try:
            vec = self._quick(text)
        except Exception as exc:
            if not self._quick_failing:
                log.warning("memtap's quick query embedding failed (%s); using the full model", exc)
                self._quick_failing = True
            return None
        if vec is not None:  # none while the embedder's table is not ready: asked again
            with self._lock:
                self._quick_cache[text] = vec
                while len(self._quick_cache) > self._cache_size:
                    self._quick_cache.popitem(last=False)
        return vec

    def _forget_asks(self, now: float) -> None:
        while self._asks and self._asks[0] < now - self.DEMAND_WINDOW:
            self._asks.popleft()

    def overloaded(self, text: str) -> bool:
        """Count a call's ask for ``text``'s vector; whether the full model is asked for
        more than :attr:`MAX_DEMAND` of a core, so that the call should not wait for it.
        Then ``text`` is embedded in the background only if it was asked before (a tool
        loop's next requests have it); the first time it is only remembered."""
        now = time.monotonic()
        with self._lock:
            self._forget_asks(now)
            self._asks.append(now)
            if len(self._asks) * self.cost <= self.MAX_DEMAND * self.DEMAND_WINDOW:
                return False
            again = text in self._shed
            if again:
                del self._shed[text]
            else:
                self._shed[text] = None
                while len(self._shed) > self._cache_size:
                    self._shed.popitem(last=False)
        if again:
            self._on_lane(text)
        return True

    def busy(self) -> bool:
        """Whether a call is waiting for a query's vector (documents then wait; a query
        nobody waits for any more does not hold them up)."""
        return self._waiters > 0

    def cached(self, text: str) -> Any:
        """The full model's vector of ``text`` if it was made already, else ``None``."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
            return hit

    def learn(self, text: str, vector: Any) -> None:
        """Keep the full model's ``vector`` of ``text`` (made by the lane, or elsewhere: a
        user's turn, by the embedding worker): the same question asked later need not be
        embedded again."""
        with self._lock:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def vector(self, text: str, timeout: float | None) -> Any:
        """The query's vector from the full model, or raise ``TimeoutError`` past
        ``timeout`` seconds (without a timeout, a model still loading is waited for); it
        is made all the same, for the next time (:class:`QueryVectors`)."""
        if timeout is None and self.loading:
            self.warm_up(wait=True)
        hit, future = self._hit_or_future(text, timeout)
        if future is None:
            return hit
        with self._waiting():
            try:
                return future.result(timeout=timeout)
            except (FutureTimeout, CancelledError) as exc:  # cancelled: a newer query took its place
                raise TimeoutError(f"query embedding took longer than {timeout} s") from exc

    async def vector_async(self, text: str, timeout: float | None) -> Any:
        """:meth:`vector` for a caller on an event loop: the wait is awaited, so the loop
        serves its other tasks meanwhile."""
        import asyncio  # on a coroutine's first use, not at `import memtap` (the command line)

        if timeout is None and self.loading:
            await asyncio.to_thread(self.warm_up, wait=True)
        hit, future = self._hit_or_future(text, timeout)
        if future is None:
            return hit
        with self._waiting():
            try:
                # Shielded: a wait that times out must not cancel the embedding, which
                # serves the same question's next request.
                return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
            except asyncio.TimeoutError as exc:
                raise TimeoutError(f"query embedding took longer than {timeout} s") from exc
            except asyncio.CancelledError:
                if future.cancelled():  # a newer query took its place on the lane
                    raise TimeoutError("query embedding dropped from the lane") from None
                raise  # the awaiting task itself was cancelled

    def _hit_or_future(self, text: str, timeout: float | None) -> tuple[Any, Future[Any] | None]:
        """``text``'s vector made already (and no future), else the lane's future of it;
        ``TimeoutError`` when it is not made and ``timeout`` allows no wait."""
        hit = self.cached(text)
        if hit is not None:
            return hit, None
        future = self._on_lane(text)
        if timeout is not None and timeout <= 0 and not future.done():
            raise TimeoutError("query embedding not waited for")
        return None, future

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        """A call waits for a query's vector meanwhile (documents wait: :meth:`busy`)."""
        with self._lock:
            self._waiters += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiters -= 1

    def _on_lane(self, text: str) -> Future[Any]:
        """The lane's future of ``text``: the one already there, or a new one that takes
        the place of a query still waiting (cancelled: never started)."""
        with self._lock:
            future = self._lane.get(text)
            if future is not None:
                return future
            for queued, waiting in list(self._lane.items()):
                if len(self._lane) < 2:
                    break
                if waiting.cancel():
                    del self._lane[queued]
            future = self._pool.submit(self._embed, text)
            self._lane[text] = future
            return future

    def _embed(self, text: str) -> Any:
        try:
            started = time.perf_counter()
            vec = self.embedder.embed([text])[0]
            # Bounded: an embedding that also loaded the model says little of the next.
            took = min(time.perf_counter() - started, 0.05)
            with self._lock:
                self.cost += 0.2 * (took - self.cost)
            self.learn(text, vec)
            return vec
        finally:
            with self._lock:
                self._lane.pop(text, None)

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop the worker thread (after the query it may be embedding) and wait for a
        warm-up still loading the model (one left running at interpreter exit can abort the
        process)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        warming = self._warming
        if warming is not None:
            warming.join(timeout)


class RecallEngine:
    """What a :class:`memtap.Memory` recalls with: indexes, embedder, background workers."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None,
        *,
        fusion: Fusion | None = None,
        max_entities: int = 256,
        refresh_after: float | None = 60.0,
        escalate_below: float = 0.2,
        escalate_shared: int = 2,
        escalate_share: float = 0.75,
    ) -> None:
        self.store = store
        self.embedder = embedder
        #: When a quick query vector's hits stand without the full model (:meth:`_words_carry`).
        self.escalate_below = escalate_below
        self.escalate_shared = escalate_shared
        self.escalate_share = escalate_share
        self.indexes = FactIndexes(
            store,
            model=embedder.name if embedder is not None else None,
            fusion=fusion,
            max_entities=max_entities,
            refresh_after=refresh_after,
            on_unembedded=self._embed_later if embedder is not None else None,
        )
        self.stats = self.indexes.stats
        self.queries = QueryVectors(embedder) if embedder is not None else None
        self.worker = (
            EmbeddingWorker(
                embedder,
                store,
                self._deliver,
                self.stats,
                skip=self._has_vector,
                quick=self.queries.quick_vector if self.queries is not None else None,
                lane_busy=self.queries.busy if self.queries is not None else None,
                known=self.queries.cached if self.queries is not None else None,
                learned=self.queries.learn if self.queries is not None else None,
            )
            if embedder is not None
            else None
        )
        #: While set (:meth:`deferring_embedding`), facts are not queued to embed but counted.
        self._deferring = False
        #: Facts left to embed later since :meth:`deferring_embedding` began.
        self.deferred = 0

    @contextlib.contextmanager
    def deferring_embedding(self) -> Iterator[None]:
        """Within the block, stored facts are indexed (recallable by words) but not queued
        to embed: :attr:`deferred` counts them. A bulk import uses it, since its facts
        arrive far faster than a local model embeds them, and queueing them held every
        fact in memory (a 100 MB transcript: +900 MB). They are embedded, in the
        background, by the process that next loads the entity's index (its missing
        vectors, :attr:`FactIndexes.on_unembedded`). It applies to every fact this engine
        stores meanwhile, not only the import's."""
        self._deferring, self.deferred = True, 0
        try:
            yield
        finally:
            self._deferring = False

    def warm_up(self) -> None:
        """Start loading the embedder's model in the background, if it has one to load
        (so that the first request does not find it cold)."""
        if self.queries is not None:
            self.queries.warm_up()

    def _has_vector(self, fact: Fact) -> bool:
        with self.indexes._lock:
            entry = self.indexes._entries.get(fact.entity_id)
        if entry is None or entry.index is None:
            return False
        with entry.lock:
            return entry.index.vector_of(fact.id, full=True) is not None

    def _embed_later(self, facts: list[Fact]) -> None:
        if self.worker is None:
            return
        if self._deferring:
            self.deferred += len(facts)
            return
        self.worker.submit(facts)

    def _deliver(self, entity_id: str, vectors: dict[str, Any], quick: bool = False) -> None:
        model = self.embedder.name if self.embedder is not None else None
        self.indexes.update_with(
            entity_id,
            lambda: prepare_vectors(vectors),
            lambda index, prepared: index.set_prepared_vectors(prepared, model, quick=quick),
        )

    def added(self, facts: Sequence[Fact]) -> None:
        """Facts were stored: index them where cached, embed them in the background."""
        by_entity: dict[str, list[Fact]] = {}
        for f in facts:
            by_entity.setdefault(f.entity_id, []).append(f)
        for entity_id, group in by_entity.items():
            self.indexes.update_with(
                entity_id,
                lambda g=group: prepare_facts(g, self.indexes.fusion),  # type: ignore[misc]
                EntityIndex.add_prepared,
            )
            retired = [f.supersedes for f in group if f.supersedes]
            if retired:
                self.indexes.update(entity_id, lambda index, r=retired: index.remove(r))  # type: ignore[misc]
        self._embed_later([f for f in facts if f.kind not in HIDDEN_KINDS])

    def context_changed(self, facts: Sequence[Fact]) -> None:
        """These stored facts' context was replaced (:meth:`EntityIndex.replace_context`):
        index it where cached. Their vectors, of their own text, stand; a fact whose
        embedded text changed with it is embedded again in the background."""
        by_entity: dict[str, list[Fact]] = {}
        for f in facts:
            by_entity.setdefault(f.entity_id, []).append(f)
        for entity_id, group in by_entity.items():

            def change(index: EntityIndex, group: list[Fact] = group) -> None:
                stale = index.replace_context(group)
                if stale:
                    self._embed_later(stale)

            self.indexes.update(entity_id, change)

    def search(
        self,
        query: str,
        *,
        entity_id: str,
        process_id: str | None = None,
        k: int = 5,
        min_score: float = 0.0,
        deadline: float | None = None,
        exclude: Sequence[str] = (),
        now: _dt.datetime | None = None,
        parts: dict[str, ScoreParts] | None = None,
        below: list[ScoredFact] | None = None,
        model_wait: float | None = None,
        shed: bool = False,
    ) -> list[ScoredFact] | None:
        """The best ``k`` facts for ``query``. With a ``deadline`` (seconds, the request
        path) a cold index is loaded in the background and ``None`` returned, and a query
        embedding later than the deadline falls back to lexical recall. Without one,
        everything is waited for. ``model_wait`` (seconds; with a deadline) is the longest
        the search waits for the full model's vector of the query when it wants one: past
        it the quick vector answers, and the full one, made meanwhile, serves the same
        question next time. With ``shed`` (and a deadline), a question the full model
        has not embedded yet does not wait for it at all while calls ask for it faster
        than it can serve them (:meth:`QueryVectors.overloaded`: :attr:`RecallStats.model_shed`).

        A time the question names ("yesterday", "in May 2023": :mod:`memtap.longterm.temporal`,
        relative to ``now``, default the current time) ranks the facts of that time first
        (:meth:`EntityIndex.search`'s ``window``); a relative expression is then left out
        of the words and meaning searched for (a fact says "yesterday" of its own day).
        A time no fact is of is ignored.

        The query's vector comes from the embedder's quick path when it has one; unless
        the words of the question found its hits (:meth:`_words_carry`), the full model
        embeds the query and the search is made again with that vector.

        The same search made again while the entity's index is unchanged (no fact added
        or removed, no vector set) is answered from a small per-entity memo: an agent's
        tool loop resends the same question on every request of a turn. A search made
        without the full model it wanted (late, failing, loading) is not remembered.

        For ``memtap explain``: with ``parts``, each returned fact's score parts are put in
        it by fact id (:meth:`EntityIndex.score_parts`); with ``below``, the facts among the
        best ``k`` that scored under ``min_score`` are appended to it (they are not
        returned)."""
        steps = self._search(
            query,
            entity_id=entity_id,
            process_id=process_id,
            k=k,
            min_score=min_score,
            deadline=deadline,
            exclude=exclude,
            now=now,
            parts=parts,
            below=below,
            model_wait=model_wait,
            shed=shed,
        )
        # Inside memtap.history.injector.without_waiting (an event loop calling without
        # search_async) the search must not block: the lane makes the vector for next time.
        waits = may_wait()
        try:
            wanted = next(steps)
            while True:
                text, timeout = wanted
                assert self.queries is not None  # only a search with a query lane waits
                try:
                    vector = self.queries.vector(text, timeout if waits else 0.0)
                except Exception as exc:
                    wanted = steps.throw(exc)
                else:
                    wanted = steps.send(vector)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except _IndexBusy:
            self._busy(entity_id)
            return None

    async def search_async(self, query: str, **options: Any) -> list[ScoredFact] | None:
        """:meth:`search` (the same arguments) for a caller on an event loop: the wait for
        the full model's vector of the query is awaited, so the loop serves its other tasks
        meanwhile (the rest of the search takes well under a millisecond)."""
        steps = self._search(query, **options)
        with without_waiting():  # nor for a cold index: it loads in the background
            try:
                wanted = next(steps)
                while True:
                    assert self.queries is not None  # only a search with a query lane waits
                    try:
                        vector = await self.queries.vector_async(*wanted)
                    except Exception as exc:
                        wanted = steps.throw(exc)
                    else:
                        wanted = steps.send(vector)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            except _IndexBusy:
                self._busy(options.get("entity_id"))
                return None

    def _busy(self, entity_id: str | None) -> None:
        """Count a search that could not read the entity's index within its deadline (it
        answers ``None``, as for an index still loading)."""
        self.stats.busy_skips += 1
        log.debug("memtap: the fact index of %r was busy past the recall deadline", entity_id)

    def _search(
        self,
        query: str,
        *,
        entity_id: str,
        process_id: str | None = None,
        k: int = 5,
        min_score: float = 0.0,
        deadline: float | None = None,
        exclude: Sequence[str] = (),
        now: _dt.datetime | None = None,
        parts: dict[str, ScoreParts] | None = None,
        below: list[ScoredFact] | None = None,
        model_wait: float | None = None,
        shed: bool = False,
    ) -> Generator[tuple[str, float | None], Any, list[ScoredFact] | None]:
        """The steps of :meth:`search`. Where it waits for the full model's vector of a
        text it yields ``(text, timeout)``; it is sent the vector, or thrown what the wait
        raised (:class:`TimeoutError`: late). One search, a blocking and an awaiting driver."""
        started = time.monotonic()
        # The deadline bounds the waits for the entity's index too: a background change
        # (new facts, vectors) may hold it for tens of milliseconds on a busy machine.
        until = None if deadline is None else started + deadline
        self.stats.searches += 1
        cold_wait = COLD_INDEX_WAIT if deadline is not None and may_wait() else 0.0
        entry = self.indexes.get(entity_id, wait=deadline is None, cold_wait=cold_wait)
        if entry is None:
            self.stats.cold_skips += 1
            return None
        if entry.index is not None and not len(entry.index):
            return []  # nothing to recall: no query vector needed
        if deadline is None and self.embedder is not None and entry.index is not None:
            self._embed_missing(entity_id, entry)

        # The time the question names, parsed once (a pass of the temporal grammar costs
        # about as much as the index search): it ranks facts of that time first when some
        # fact is of it, and a relative one is left out of the words either way.
        named = query_window(query, aware(now) if now is not None else utcnow())
        window = self._window(named, entry, until)
        asked = (
            query,
            window,
            process_id,
            k,
            min_score,
            tuple(exclude),
            parts is not None,
            below is not None,
        )
        memo = self._memo(entry, asked, until)
        if memo is not None:
            self.stats.memo_hits += 1
            if parts is not None:
                parts.clear()
                parts.update(memo.parts or {})
            if below is not None:
                below[:] = memo.below or ()
            return list(memo.hits)
        about_assistant = asks_assistant(query)
        present = asks_present(query)
        # A relative time is left out of the words even when no fact is of it (the window
        # is then ignored): words nothing uses would still lower every fact's coverage.
        if named is not None and named.relative:
            query = named.cut_from(query)
        counts = term_counts(query)
        searched: list[tuple[EntityIndex, int]] = []  # the index and version last searched

        def search_with(qvec: Any, judge: bool = False) -> tuple[list[tuple[Fact, float]], bool] | None:
            """The hits for ``qvec`` and, with ``judge``, whether the words of the question
            found them (:meth:`_words_carry`)."""
            with _Held(entry.lock, until, self.stats):
                index = entry.index
                if index is None:
                    return None
                searched[:] = [(index, index.version)]
                if parts is not None:
                    parts.clear()
                hits = index.search(
                    counts,
                    qvec,
                    k=k,
                    process_id=process_id,
                    min_score=min_score if below is None else 0.0,
                    exclude=exclude,
                    window=window,
                    parts=parts,
                    about_assistant=about_assistant,
                    present=present,
                )
                if below is not None:
                    under = [h for h in hits if h[1] < min_score]
                    if under:
                        hits = [h for h in hits if h[1] >= min_score]
                        below[:] = [ScoredFact(fact=f, score=s) for f, s in under]
                    else:
                        below.clear()
                return hits, judge and self._words_carry(index, counts, hits)

        # A question that is only a time ("what happened yesterday?") has no meaning to embed.
        only_time = window is not None and not counts
        wanted = self.queries is not None and bool(query.strip()) and not only_time
        if wanted and self.queries is not None:
            self.queries.warm_up()  # once: loads the model in the background
        quick = self.queries.quick(query) if self.queries is not None and wanted else None
        found = None
        if quick is not None:
            self.stats.quick_queries += 1
            found = search_with(quick, judge=True)
            if found is None:
                return None
            hits, sure = found
            if sure:
                return self._remember(entry, asked, searched, hits, parts, below, until)
            self.stats.escalations += 1
        full = (yield from self._full_vector(query, deadline, started, model_wait, shed)) if wanted else None
        if full is not None or found is None:
            if full is None:
                self.stats.lexical_only += 1
            try:
                found = search_with(full)
            except _IndexBusy:
                if found is None:
                    raise
                # The index was taken while the full model answered: the quick vector's
                # answer stands, as when the full model is late (below).
                self.stats.busy_skips += 1
                full = None
        # else the full model is late, failing or shed: the quick vector's answer stands
        if found is None:
            return None
        if wanted and full is None:  # a later search may have the full model: not remembered
            return [ScoredFact(fact=f, score=s) for f, s in found[0]]
        return self._remember(entry, asked, searched, found[0], parts, below, until)

    #: How many searches each entity's memo keeps.
    MEMO_SIZE = 8

    def _memo(self, entry: _Entry, asked: tuple[Any, ...], until: float | None = None) -> _Memo | None:
        """The remembered answer to ``asked``, if the entity's index is still the one it
        came from, unchanged."""
        with _Held(entry.lock, until, self.stats):
            memo = entry.memo.get(asked)
            if memo is None:
                return None
            if memo.index is not entry.index or memo.version != memo.index.version:
                del entry.memo[asked]
                return None
            entry.memo.move_to_end(asked)
            return memo

    def _remember(
        self,
        entry: _Entry,
        asked: tuple[Any, ...],
        searched: list[tuple[EntityIndex, int]],
        hits: list[tuple[Fact, float]],
        parts: dict[str, ScoreParts] | None,
        below: list[ScoredFact] | None,
        until: float | None = None,
    ) -> list[ScoredFact]:
        """``hits`` as the search's answer, remembered for the same search (``searched``:
        the index and version they were found in) unless the index is not free before
        ``until``: the answer is given all the same."""
        found = [ScoredFact(fact=f, score=s) for f, s in hits]
        if searched:
            index, version = searched[0]
            memo = _Memo(
                index,
                version,
                tuple(found),
                dict(parts) if parts is not None else None,
                tuple(below) if below is not None else None,
            )
            with contextlib.suppress(_IndexBusy), _Held(entry.lock, until, self.stats):
                entry.memo[asked] = memo
                entry.memo.move_to_end(asked)
                while len(entry.memo) > self.MEMO_SIZE:
                    entry.memo.popitem(last=False)
        return found

    def _window(
        self, window: TimeWindow | None, entry: _Entry, until: float | None = None
    ) -> TimeWindow | None:
        """``window`` (the time a question names), if some fact of the entity is of that time."""
        if window is None:
            return None
        with _Held(entry.lock, until, self.stats):
            index = entry.index
            return window if index is not None and bool(index.in_window(window).any()) else None

    def _words_carry(
        self, index: EntityIndex, counts: Mapping[str, int], hits: Sequence[tuple[Fact, float]]
    ) -> bool:
        """Whether ``hits``, found with a quick query vector, can stand without the full
        model: the words of the question found them.

        The quick vector bridges meaning weakly (on questions asked in other words than
        their facts it finds the answer in the top 5 about 60% of the time where the full
        model finds it 96%), so the words must carry the question: every query term occurs
        in some fact, and the best hit is convincing (scores at least ``escalate_below``),
        says in its own text (not its context) at least ``escalate_shared`` of the query's
        terms and at least ``escalate_share`` of their BM25 weight. One shared word is not
        enough: "what dog do I have?" finds "the neighbours' dog barks all night" by its
        one word, while the answer is "I adopted a beagle"; nor are words a short turn only
        has from the turns around it ("ok add that", indexed with "work" and "days" of its
        context, is no answer to "where do I work these days?"). Anything else is where
        meaning must bridge: the full model is asked (``benchmarks/paraphrase_recall.py``)."""
        if not hits or hits[0][1] < self.escalate_below or index.unseen_terms(counts):
            return False
        shared, share = index.shared_terms(hits[0][0].id, counts, own_words=True)
        return shared >= self.escalate_shared and share >= self.escalate_share

    def _full_vector(
        self, query: str, deadline: float | None, started: float, wait: float | None, shed: bool = False
    ) -> Generator[tuple[str, float | None], Any, Any]:
        """The query's vector from the full model within what is left of ``deadline``
        (and at most ``wait``), or ``None`` (late, failing, or with ``shed`` not asked
        under load: counted)."""
        assert self.queries is not None
        if deadline is not None and self.queries.loading:
            self.stats.model_loading += 1  # words (and the quick vector) answer meanwhile
            return None
        if deadline is not None and shed:
            hit = self.queries.cached(query)
            if hit is not None:
                return hit
            if self.queries.overloaded(query):
                self.stats.model_shed += 1
                self.stats.model_deferred += 1
                return None
        remaining = None if deadline is None else max(0.0, deadline - (time.monotonic() - started))
        deferred = remaining is not None and wait is not None and wait < remaining
        if deferred:
            remaining = wait
        try:
            return (yield (query, remaining))
        except TimeoutError:
            if deferred:
                self.stats.model_deferred += 1
            else:
                self.stats.embed_timeouts += 1
        except Exception as exc:
            self.stats.embed_failures += 1
            count("failed", reason="embed_query")
            log.warning("memtap could not embed a recall query (%s); recalling by words only", exc)
        return None

    def _embed_missing(self, entity_id: str, entry: Any) -> None:
        """Without a deadline recall waits for vectors: embed what the background worker
        has not done yet (in memory; the worker still stores its own)."""
        with _Held(entry.lock, None, self.stats):
            missing = entry.index.missing_vectors() if entry.index is not None else []
        if not missing or self.embedder is None:
            return
        try:
            rows = self.embedder.embed([embedding_text(f) for f in missing])
        except Exception as exc:
            self.stats.embed_failures += 1
            count("failed", reason="embed")
            log.warning("memtap could not embed facts for recall (%s); recalling by words", exc)
            return
        vectors = {f.id: row for f, row in zip(missing, rows)}
        self._deliver(entity_id, vectors)
        if self.worker is not None:
            self.worker.store_vectors(vectors)

    def forget(self, entity_id: str) -> None:
        """Drop the entity's cached index."""
        self.indexes.drop(entity_id)

    def refresh(self, entity_id: str | None = None) -> None:
        """Another process changed the entity's facts (any entity's, without
        ``entity_id``): reload its cached index in the background
        (:meth:`FactIndexes.refresh`)."""
        self.indexes.refresh(entity_id)

    def take_in(self, entity_id: str, fact_ids: Sequence[str]) -> None:
        """Another process stored these facts of the entity (``()``: some facts): add them
        to its cached index, or reload it (:meth:`FactIndexes.take_in`)."""
        self.indexes.take_in(entity_id, fact_ids)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait for background embedding."""
        return self.worker.flush(timeout) if self.worker is not None else True

    def close(self, timeout: float | None = 10.0) -> None:
        """Finish background embedding, stop the threads."""
        if self.worker is not None:
            self.worker.close(timeout)
        if self.queries is not None:
            self.queries.close(timeout)
        self.indexes.close()
