"""Background threads yield the CPU to the request path.

memtap's heavy background work (embedding facts, extracting them with an LLM port,
building the quick query table) runs in threads of the application's own process. On a
small machine such a thread competes with the threads serving requests for the same
cores; Linux gives each thread its own nice value, so the worker lowers its own.

:class:`DaemonPool` runs store reads that the request path must never wait on for long;
:class:`LazyThread` is a worker's one thread, started on first use.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

#: Nice value (added to the process's) of memtap's background workers.
BACKGROUND_NICENESS = 10


def lower_priority(niceness: int = BACKGROUND_NICENESS) -> bool:
    """Lower the calling thread's CPU priority (Linux: per thread); ``False`` where the
    platform cannot (the work then runs at normal priority)."""
    setpriority = getattr(os, "setpriority", None)
    if setpriority is None or not hasattr(threading, "get_native_id"):
        return False
    try:
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, current + niceness))
    except OSError:
        return False
    return True


class LazyThread:
    """A worker's one daemon thread, started by the first caller that needs it (from any
    thread), and seen by others only once its start has returned: a ``close()`` racing the
    first submit must not join a thread that is not started yet (``RuntimeError: cannot
    join thread before it is started``, seen when an app closed memtap at once while its
    first calls were being queued)."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self._target = target
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread, unless it was started already."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._target, name=self.name, daemon=True)
                thread.start()
                self._thread = thread

    def started(self) -> threading.Thread | None:
        """The thread once started (a start in progress is waited for), or ``None``."""
        with self._lock:
            return self._thread


class DaemonPool:
    """Up to ``workers`` daemon threads running submitted functions, started on demand
    (with ``low_priority``, each at background CPU priority).

    Why not ``concurrent.futures.ThreadPoolExecutor``: its workers are joined when the
    interpreter exits, so one stuck on a store that stopped answering (a frozen network
    connection) would hang the application's exit. Store reads are safe to abandon.
    """

    def __init__(self, workers: int, name: str, *, low_priority: bool = False) -> None:
        self._workers = max(1, workers)
        self._name = name
        #: Whether each worker lowers its own CPU priority (:func:`lower_priority`) first.
        self._low_priority = low_priority
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        self._closed = False
        self._pid = os.getpid()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run ``fn(*args)`` in a worker; raises ``RuntimeError`` after :meth:`shutdown`."""
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is shut down")
            if self._pid != os.getpid():  # forked: the parent's workers are not here
                self._pid, self._threads, self._idle = os.getpid(), 0, 0
            self._queue.put((future, fn, args))
            start = self._idle == 0 and self._threads < self._workers
            if start:
                self._threads += 1
        if start:
            threading.Thread(target=self._run, name=f"{self._name}-{self._threads}", daemon=True).start()
        return future

    def _run(self) -> None:
        if self._low_priority:
            lower_priority()
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Stop taking work, cancel what has not started, let the workers end (a worker in
        the middle of a call ends after it, or with the process)."""
        with self._lock:
            self._closed = True
            threads = self._threads
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in range(threads):
            self._queue.put(None)


# -- calls in flight ----------------------------------------------------------------------
#
# A background thread holding the GIL in a long C call (a tokenizer parsing its file, an
# extension module being imported) stops every request thread of the process until it
# returns, however low its CPU priority. One-off loading work therefore runs its GIL-heavy
# steps between calls: each step first waits (bounded) until no call is in flight.

_in_flight = 0
#: How many calls have started in this process (tells a quiet moment from a busy one).
_started = 0
#: When the last call started (``time.monotonic()``; never: ``-inf``).
_last_started = float("-inf")
_quiet = threading.Condition()


def call_started() -> None:
    """An intercepted LLM call began (see :func:`wait_for_quiet`)."""
    global _in_flight, _started, _last_started
    with _quiet:
        _in_flight += 1
        _started += 1
        _last_started = time.monotonic()


def call_ended() -> None:
    """An intercepted LLM call finished (once per :func:`call_started`)."""
    global _in_flight
    with _quiet:
        _in_flight = max(0, _in_flight - 1)
        if not _in_flight:
            _quiet.notify_all()


def calls_in_flight() -> int:
    """How many intercepted calls are running now."""
    return _in_flight


def quiet_for(seconds: float) -> bool:
    """Whether no intercepted call is running and none has started for ``seconds``: work
    that would take every core may run now without slowing a call (a bulk import, a
    ``remember`` loop: no call at all)."""
    return not _in_flight and time.monotonic() - _last_started >= seconds


def wait_for_quiet(timeout: float = 1.0, *, settle: float = 0.0) -> bool:
    """Wait until no intercepted call is in flight, and none has started for ``settle``
    seconds (an app that registers a client and calls it at once), at most ``timeout``
    seconds in all (an app that is never quiet still gets its loading done); whether it
    was quiet."""
    deadline = time.monotonic() + timeout
    while True:
        with _quiet:
            remaining = deadline - time.monotonic()
            if not _quiet.wait_for(lambda: not _in_flight, max(0.0, remaining)):
                return False
            started = _started
        if settle <= 0:
            return True
        time.sleep(min(settle, max(0.0, deadline - time.monotonic())))
        if _started == started and not _in_flight:
            return True
        if time.monotonic() >= deadline:
            return False
