"""The capture path: the request thread only enqueues; a background writer formats and
stores, in batches, and keeps what the store could not take until it can be written.

A store may refuse a batch for what one of its records holds (text it cannot encode, a
value too large, a constraint) rather than because it is down. Retrying that batch would
stop every call behind it, so the writer isolates the refused records (splitting the batch
until each refusal is one record) and puts them in quarantine
(:mod:`memtap.capture.quarantine`); the rest of the batch is stored at once.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs

from memtap.capture.isolation import halves, isolate
from memtap.capture.quarantine import Quarantine, is_refusal
from memtap.capture.spool import Segment, Spool
from memtap.metrics import count
from memtap.protocol.model import Exchange
from memtap.workers.background import LazyThread
from memtap.workers.pending import PendingWork

log = logging.getLogger("memtap.capture.writer")


class CapturedCall:
    """A finished call waiting to become an :class:`Exchange`.

    Formatting is deferred (off the request path) and memoised: the writer and the history
    cache may both ask, the work is done once. It has two steps: ``build`` formats the
    call (its messages: all the history cache needs, and it may need them on the next
    call's path, before the writer got to this one), ``finish`` completes what only the
    stored record needs (the record of what was injected, the call's span); the writer
    asks for both.
    """

    __slots__ = (
        "_build",
        "_done",
        "_exchange",
        "_finish",
        "_finished",
        "_lock",
        "attribution",
        "replayed",
        "segment",
    )

    def __init__(
        self,
        build: Callable[[], Exchange | None],
        attribution: object = None,
        *,
        finish: Callable[[Exchange | None], Exchange | None] | None = None,
        segment: Segment | None = None,
        replayed: bool = False,
    ) -> None:
        self._build: Callable[[], Exchange | None] | None = build
        self._finish = finish
        self._exchange: Exchange | None = None
        self._done = False
        self._finished = finish is None
        self._lock = threading.Lock()
        self.attribution = attribution
        #: The spool segment journaling this call (``None``: not journaled).
        self.segment = segment
        #: Whether this call comes from a spool a previous process left.
        self.replayed = replayed

    def formatted(self) -> Exchange | None:
        """The call formatted, with its messages as stored (``None`` if there is nothing to
        store or formatting failed; a failure is logged), without what only the stored
        record needs. Done once, whoever asks first; then the builder, and the finished
        call it holds (body, response), is let go: the history cache may keep this object
        as long as its session."""
        if self._done:
            return self._exchange
        with self._lock:
            if not self._done:
                build, self._build = self._build, None
                try:
                    self._exchange = build() if build is not None else None
                except Exception:
                    count("failed", reason="format")
                    log.exception("memtap could not format a captured call; it is not stored")
                finally:
                    self._done = True
        return self._exchange

    def exchange(self) -> Exchange | None:
        """The exchange to store: :meth:`formatted`, finished (once)."""
        exchange = self.formatted()
        if self._finished:
            return self._exchange
        with self._lock:
            if not self._finished:
                finish, self._finish = self._finish, None
                try:
                    if finish is not None:
                        self._exchange = finish(exchange)
                except Exception:
                    log.exception("memtap could not complete the record of a captured call")
                finally:
                    self._finished = True
        return self._exchange


@attrs.define
class CaptureStats:
    """Counters of the capture path since the writer started."""

    captured: int = 0
    written: int = 0
    unformatted: int = 0
    dropped: int = 0
    write_failures: int = 0
    quarantined: int = 0


_STOP = object()
_FLUSH = object()


@attrs.define
class _Outcome:
    """What one round of writes did with the held records."""

    stored: list[tuple[Exchange, CapturedCall]] = attrs.Factory(list)
    refused: list[tuple[tuple[Exchange, CapturedCall], Exception]] = attrs.Factory(list)
    held: list[tuple[Exchange, CapturedCall]] = attrs.Factory(list)
    #: The first failure that was not a refusal (``None``: none).
    error: Exception | None = None
    #: Whether the store answered this round (a write went through, or a refusal).
    alive: bool = False
    #: Records that failed alone with an error that is not a refusal.
    suspects: list[tuple[tuple[Exchange, CapturedCall], Exception]] = attrs.Factory(list)


class CaptureWriter:
    """Writes captured calls to a store from one background thread.

    ``write`` stores a batch (all or nothing). When it raises, the batch is kept in memory
    (at most ``max_buffered`` exchanges; beyond that the oldest are dropped with a logged,
    counted warning) and retried with exponential backoff; the error is logged once per
    outage. ``on_written`` callbacks see every stored batch.

    After the first call of a batch arrives the writer lingers up to ``linger`` seconds for
    more (unless :meth:`flush` is waiting), so a store whose every statement has a fixed
    cost (DuckDB: about a millisecond) is written in few, larger transactions. While calls
    keep coming (the last batch held more than one), it lingers :attr:`AMORTISE` times as
    long as its last write took, up to ``max_linger``: a DuckDB transaction of exchanges
    costs ~14 ms of CPU whether it holds 1 call or 30, and on a 5,000-call soak the
    writer's, memorize's and DuckDB's threads used a quarter to a third less CPU with
    batches three times as large (issue 37). A call alone is written after ``linger``.
    """

    #: While calls keep coming, linger at least this many times the last write's duration:
    #: writes then take about a tenth of the writer's time, whatever a store's fixed costs.
    AMORTISE = 10.0

    def __init__(
        self,
        write: Callable[[list[Exchange]], None],
        *,
        batch_size: int = 256,
        max_buffered: int = 100_000,
        retry_initial: float = 0.05,
        retry_max: float = 5.0,
        linger: float = 0.05,
        max_linger: float = 0.25,
        spool: Spool | None = None,
        format_in_caller: bool = False,
        storable: Callable[[Exchange], Exchange] | None = None,
        quarantine: Quarantine | None = None,
        probe: Callable[[], object] | None = None,
    ) -> None:
        self._write = write
        #: A cheap read of the store: whether it answers, after a write failed in a way
        #: that says neither "refused" nor "down".
        self._probe = probe
        #: Makes an exchange's text storable before it is written (lone surrogates and
        #: characters the store cannot hold become U+FFFD).
        self._storable = storable
        #: Where records the store refuses go (``None``: in this process's memory).
        self.quarantine = quarantine if quarantine is not None else Quarantine(None)
        #: The durable spool whose segments are released once their calls are stored.
        self.spool = spool
        self._batch_size = batch_size
        self._max_buffered = max_buffered
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._linger = linger
        self._max_linger = max(linger, max_linger)
        #: The last write that stored a batch: its size and how long it took (seconds).
        self._last_batch = 0
        self._last_write = 0.0
        #: Calls arrive formatted: the thread finishing a call formats it before queueing
        #: it (:attr:`memtap.Memory.format_in_caller`), and the writer wakes once per batch,
        #: not once per call, competing less for the GIL. Otherwise the writer formats each
        #: call as soon as it is queued, so that the next call of its session finds it
        #: formatted.
        self.format_in_caller = format_in_caller
        #: Set by :meth:`flush` and :meth:`close` to cut a linger short.
        self._hurry = threading.Event()
        self._flushing = 0
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._held: deque[tuple[Exchange, CapturedCall]] = deque()
        self._pending = PendingWork()
        self._flushing_lock = threading.Lock()
        self._thread = LazyThread(self._run, "memtap-writer")
        self._closed = False
        #: close() stopped waiting for the thread: it writes nothing more (the store may
        #: be closed; what it held is in the spool for the next start).
        self._abandoned = False
        #: Whether the last write failed (what close() says of the calls left).
        self._store_failing = False
        self.stats = CaptureStats()
        self.on_written: list[Callable[[list[Exchange]], None]] = []
        #: Told each stored batch after the ``on_written`` callbacks, with a function that
        #: releases the batch's spool records; returns whether it calls that function once
        #: it is done with the batch (memorize: a call stored but not memorized when the
        #: process dies is replayed, and memorized, by the next one). ``None``, or ``False``
        #: from it: the records are released at once.
        self.memorize: Callable[[list[Exchange], Callable[[], None]], bool] | None = None

    def submit(self, item: CapturedCall) -> None:
        """Queue a finished call for storage (cheap; never blocks on the store)."""
        if self._closed:
            log.warning("memtap writer is closed; a captured call was not stored")
            return
        self._pending.add()
        self.stats.captured += 1
        self._queue.put(item)
        self._thread.start()

    @contextmanager
    def expecting(self) -> Iterator[None]:
        """While the block runs, :meth:`flush` waits as for one more submitted call: for a
        caller that hands an answer's last bytes to the app before it finishes the call (the
        proxy does not hold the answer back for memtap), so that an app which has read them
        and flushes finds the call stored."""
        self._pending.add()
        try:
            yield
        finally:
            self._pending.done()

    @contextmanager
    def hurried(self) -> Iterator[None]:
        """While the block runs, the writer does not linger for a batch: for a caller that
        waits for the call it submits inside the block to be stored (the proxy commits a
        call to a store other processes read before the answer's last bytes)."""
        with self._flushing_lock:
            self._flushing += 1
        self._hurry.set()
        try:
            yield
        finally:
            with self._flushing_lock:
                self._flushing -= 1

    def _finish(self, n: int) -> None:
        self._pending.done(n)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until everything submitted so far is stored; ``False`` on timeout (for
        example while the store is down: the calls stay queued and are retried)."""
        if self._pending.count == 0:
            return True
        with self._flushing_lock:
            self._flushing += 1
        self._queue.put(_FLUSH)
        self._hurry.set()
        try:
            return self._pending.wait(timeout)
        finally:
            with self._flushing_lock:
                self._flushing -= 1

    def wait_backlog(self, most: int, timeout: float | None) -> bool:
        """Wait until at most ``most`` submitted calls are not stored yet (a bulk producer's
        backpressure: the writer keeps working meanwhile); ``False`` on timeout."""
        return self._pending.wait(timeout, most=most)

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush, then stop the thread. Returns whether everything was stored."""
        ok = self.flush(timeout)
        self._closed = True
        thread = self._thread.started()
        if thread is not None:
            self._queue.put(_STOP)
            self._hurry.set()
            thread.join(timeout)
            self._abandoned = thread.is_alive()
        if not ok:
            log.warning(
                "memtap closed with %d captured call(s) not stored: %s; %s",
                self._pending.count,
                "the store is failing" if self._store_failing else f"close() waited {timeout} s for them",
                "they are in the spool and are stored at the next start"
                if self.spool is not None
                else "without a spool they are lost",
            )
        return ok

    def _take_batch(self, wait: float | None) -> tuple[list[CapturedCall], bool]:
        """Wait up to ``wait`` (forever if ``None``) for a first item, then linger for more
        (not while a flush is waiting). Returns the batch and whether to stop."""
        try:
            first = self._queue.get() if wait is None else self._queue.get(timeout=wait)
        except queue.Empty:
            return [], False
        if first is _STOP:
            return [], True
        batch: list[CapturedCall] = []
        ahead = not self.format_in_caller
        linger = self._lingering()
        if first is not _FLUSH:
            batch.append(first)  # type: ignore[arg-type]
            # Format now, while the request thread waits on the network: the next call of
            # the same session then finds the exchange ready for its history.
            if ahead:
                batch[0].exchange()
            elif not self._flushing and self._queue.empty():
                # Linger without being woken by each call, then take what came (not when
                # calls are already waiting: a backlog is written at once).
                self._hurry.wait(linger)
        self._hurry.clear()
        deadline = time.monotonic() + linger
        while len(batch) < self._batch_size:
            lingering = ahead and batch and not self._flushing
            timeout = deadline - time.monotonic() if lingering else 0.0
            try:
                item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            if item is not _FLUSH:
                batch.append(item)  # type: ignore[arg-type]
                if ahead:
                    batch[-1].exchange()
        return batch, False

    def _lingering(self) -> float:
        """How long to linger for the next batch (see the class)."""
        if self._last_batch < 2:
            return self._linger
        return min(self._max_linger, max(self._linger, self.AMORTISE * self._last_write))

    def _run(self) -> None:
        backoff = self._retry_initial
        failing = False
        while True:
            batch, stop = self._take_batch(backoff if self._held else None)
            if self._abandoned:
                return  # close() gave up on this thread: its calls stay in the spool
            backoff, failing, stop = self._process(batch, stop, backoff, failing)
            self._store_failing = failing
            del batch  # let go of the batch's calls while waiting for the next one
            if stop:
                return

    def _process(
        self, batch: list[CapturedCall], stop: bool, backoff: float, failing: bool
    ) -> tuple[float, bool, bool]:
        """Format and store one batch (kept, with what is held, when the store refuses it).
        Returns the next backoff, whether the store is failing, and whether to stop."""
        self._count_taken(batch)
        for item in batch:
            ex = item.exchange()
            if ex is None:
                self.stats.unformatted += 1
                self._release([item])
                self._finish(1)
            else:
                self._held.append((self._storable_exchange(ex), item))
        # Pinned before the dropped ones are forgotten: from here until the write ends, the
        # spool's bound drops none of the calls it writes.
        pinned = [item.segment for _, item in self._held]
        self._tell_spool(Spool.pin, pinned)
        try:
            return self._write_held(stop, backoff, failing)
        finally:
            self._tell_spool(Spool.unpin, pinned)

    def _write_held(self, stop: bool, backoff: float, failing: bool) -> tuple[float, bool, bool]:
        """Store what is held (see :meth:`_process`)."""
        self._drop_spool_dropped()
        self._bound_held()
        if not self._held:
            return backoff, failing, stop
        pending = list(self._held)
        outcome = _Outcome()
        started = time.monotonic()
        self._write_isolating(pending, outcome)
        if not outcome.held and not outcome.refused:  # one write stored them all
            self._last_batch, self._last_write = len(pending), time.monotonic() - started
        if outcome.refused:
            self._quarantine(outcome.refused)
        if outcome.held:
            exc = outcome.error
            count("failed", len(outcome.held), reason="store_write")
            if self._abandoned:
                # close() gave up on this write and closed the store under it: the calls
                # are in the spool for the next start; nothing failed.
                return backoff, failing, True
            if not failing:
                log.error(
                    "memtap could not store %d exchange(s): %s; they are kept and "
                    "retried (the application's calls are not affected)",
                    len(outcome.held),
                    exc,
                )
                failing = True
            self._held = deque(outcome.held)
            backoff = min(self._retry_max, backoff * 2)
        else:
            self._held.clear()
            if failing:
                log.warning("memtap storage is back; %d exchange(s) stored", len(outcome.stored))
                failing = False
            backoff = self._retry_initial
        if outcome.stored:
            self._stored(outcome.stored)
        return backoff, failing, stop

    def _storable_exchange(self, ex: Exchange) -> Exchange:
        if self._storable is None:
            return ex
        try:
            return self._storable(ex)
        except Exception:  # never lose the record for this: the store decides
            log.exception("memtap could not make a captured call's text storable")
            return ex

    def _write_isolating(self, part: list[tuple[Exchange, CapturedCall]], outcome: _Outcome) -> None:
        """Write ``part``; when that fails, find out whether the store refuses some of its
        records or is unavailable, and isolate the refused ones.

        A failure the store classifies as a refusal (:func:`is_refusal`) means it answers:
        ``part`` is split until each failing record is alone. Any other failure may be a
        store that is down: the ``probe`` (a cheap read) decides; when it fails (or there is
        none and neither half of ``part`` goes through) everything is held, to be retried,
        at the cost of two or three operations per retry rather than one per record. A
        record whose failure is not classified is quarantined only when another record of
        the round was stored (writes do work: a full disk fails every record, and then all
        are held, not quarantined).

        Bisection (rather than record by record) keeps a batch of good records one write,
        and costs about 2·log2(n) writes per refused record."""
        exc = self._try_write(part, outcome)
        if exc is None:
            return
        failing = [(part, exc)] if outcome.alive else self._failing_parts(part, exc, outcome)
        if failing is None:
            outcome.error = exc
            outcome.held.extend(part)
            return
        for failed, failed_exc in failing:
            self._isolate(failed, failed_exc, outcome)
        if outcome.suspects:
            if outcome.stored:
                outcome.refused.extend(outcome.suspects)
            else:
                outcome.error = outcome.suspects[0][1]
                outcome.held.extend(record for record, _ in outcome.suspects)
            outcome.suspects.clear()

    def _failing_parts(
        self, part: list[tuple[Exchange, CapturedCall]], exc: Exception, outcome: _Outcome
    ) -> list[tuple[list[tuple[Exchange, CapturedCall]], Exception]] | None:
        """After ``part`` failed in a way that is not a refusal: ``None`` when the store
        does not answer (the probe fails; without a probe, neither half of ``part`` can be
        written either), else the parts still to isolate."""
        if self._probe is not None:
            try:
                self._probe()
            except Exception:
                return None
            return [(part, exc)]
        failed = []
        for half in halves(part):
            half_exc = self._try_write(half, outcome)
            if half_exc is not None:
                failed.append((half, half_exc))
        return failed if outcome.alive else None

    def _isolate(self, part: list[tuple[Exchange, CapturedCall]], exc: Exception, outcome: _Outcome) -> None:
        """``part`` failed with ``exc`` while the store answers: split it until each record
        that fails is alone (refused, or suspect when the failure is not classified)."""
        isolate(part, exc, lambda half: self._try_write(half, outcome), outcome.refused, outcome.suspects)

    def _try_write(self, part: list[tuple[Exchange, CapturedCall]], outcome: _Outcome) -> Exception | None:
        """Write ``part`` in one transaction; the error, or ``None`` when it is stored."""
        try:
            self._write([ex for ex, _ in part])
        except Exception as exc:
            self.stats.write_failures += 1
            outcome.alive = outcome.alive or is_refusal(exc)
            return exc
        outcome.alive = True
        outcome.stored.extend(part)
        return None

    def _quarantine(self, refused: list[tuple[tuple[Exchange, CapturedCall], Exception]]) -> None:
        """Put refused records in quarantine and let go of them (their spool lines too)."""
        for (ex, _), exc in refused:
            kept = self.quarantine.put(ex, f"{type(exc).__name__}: {exc}")
            log.error(
                "memtap: the store refused captured call %s (%s); %s, the calls around it are "
                "stored (`memtap quarantine list` shows it)",
                ex.id,
                exc,
                "it is kept in quarantine" if kept else "it could not be kept",
            )
        self.stats.quarantined += len(refused)
        count("quarantined", len(refused))
        self._release([item for (_, item), _ in refused])
        self._finish(len(refused))

    def _stored(self, pending: list[tuple[Exchange, CapturedCall]]) -> None:
        """Account for stored records: counters, ``on_written`` callbacks, then the spool
        records handed to memorize (released when it is done with them)."""
        self.stats.written += len(pending)
        count("stored", len(pending))
        count("replayed", sum(1 for _, item in pending if item.replayed))
        stored = [ex for ex, _ in pending]
        for callback in self.on_written:
            try:
                callback(stored)
            except Exception:
                log.exception("memtap on_written callback failed")
        self._hand_over(stored, [item for _, item in pending])
        self._finish(len(pending))

    @staticmethod
    def _count_taken(batch: list[CapturedCall]) -> None:
        fresh = [item for item in batch if not item.replayed]
        count("captured", len(fresh))
        count("spooled", sum(1 for item in fresh if item.segment is not None))

    def _hand_over(self, stored: list[Exchange], items: list[CapturedCall]) -> None:
        """Hand a stored batch to :attr:`memorize`, which releases its spool records when
        it is done with it; or release them now."""
        # The spool segments only: the calls themselves are let go while memorize works.
        segments = [item.segment for item in items]
        self._tell_spool(Spool.stored, segments)
        release = functools.partial(self._release_segments, segments, stored=True)
        kept = False
        if self.memorize is not None:
            try:
                kept = self.memorize(stored, release)
            except Exception:
                log.exception("memtap could not hand stored exchanges to memorize")
        if not kept:
            release()

    def _release(self, items: list[CapturedCall]) -> None:
        """Tell the spool these calls need no replay any more (stored, or given up)."""
        self._release_segments([item.segment for item in items])

    def _release_segments(self, segments: list[Segment | None], *, stored: bool = False) -> None:
        """Tell the spool the records of these segments need no replay any more (``stored``:
        the store has them, as :meth:`_hand_over` told the spool with ``Spool.stored``)."""
        self._tell_spool(functools.partial(Spool.done, stored=stored), segments)

    def _tell_spool(
        self, tell: Callable[[Spool, list[Segment]], None], segments: list[Segment | None]
    ) -> None:
        """``tell(spool, segments)`` for the journaled ones of ``segments`` (errors logged:
        the spool's bookkeeping never stops a write)."""
        journaled = [seg for seg in segments if seg is not None]
        if self.spool is not None and journaled:
            try:
                tell(self.spool, journaled)
            except Exception:
                log.exception("memtap could not update its spool")

    def _drop_spool_dropped(self) -> None:
        """Forget held calls whose spool segment was dropped for the spool's bound (they
        were counted and logged as dropped there)."""
        if not self._held or self.spool is None:
            return
        kept = deque(entry for entry in self._held if not (entry[1].segment and entry[1].segment.dropped))
        gone = len(self._held) - len(kept)
        if gone:
            self._held = kept
            self.stats.dropped += gone
            count("dropped", gone, reason="spool_bound")
            self._finish(gone)

    def _bound_held(self) -> None:
        excess = len(self._held) - self._max_buffered
        if excess > 0:
            gone = [self._held.popleft()[1] for _ in range(excess)]
            self._release(gone)
            self.stats.dropped += excess
            count("dropped", excess, reason="buffer_bound")
            log.warning(
                "memtap dropped the %d oldest unstored exchange(s): more than %d are waiting "
                "for the store (%d dropped in all)",
                excess,
                self._max_buffered,
                self.stats.dropped,
            )
            self._finish(excess)
