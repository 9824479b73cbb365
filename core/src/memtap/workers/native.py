"""Background work in native code ends before the interpreter does.

When CPython finalizes, a daemon thread that comes back from a C++ or Rust call which had
released the GIL (onnxruntime's ``Run``, a tokenizer's batch, a DuckDB statement) is ended
by ``pthread_exit``. Its forced unwind runs through those native frames, reaches
``std::terminate``, and the whole process aborts at exit (status 134, "terminate called
without an active exception"): an application that had finished its work dies with
SIGABRT because memtap was still embedding a backlog.

So memtap's background threads run such work as a unit (:func:`native_work`), and at
interpreter exit (:func:`settle`, registered with :mod:`atexit` when this module is
imported, which ``memtap`` does first: its handler runs after every ``Memory``'s own
close) no new unit starts and the ones in flight are waited for. A unit is short (one
batch of texts through the model, its vectors stored) and the wait is bounded
(:data:`EXIT_GRACE`).

Work on the request path does not need it: the thread that finalizes is the one that
made the call. Store reads that may be abandoned on a frozen network connection do not
use it either (libpq is C: ending such a thread is safe, and exit must not wait on it).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator

#: How long interpreter exit waits for units of native work in flight (seconds): a batch
#: of the model on a loaded host takes well under one.
EXIT_GRACE = 30.0


class InterpreterExiting(RuntimeError):
    """Raised by :func:`native_work` once the interpreter has begun to exit: the
    background thread should end without starting the work (what it was to do is
    done again at the next start, as after any interrupted run)."""


_units = threading.Condition()
_in_flight = 0
_exiting = False


@contextlib.contextmanager
def native_work() -> Iterator[None]:
    """Run the body as one unit of work that calls native code: interpreter exit waits
    for it. In a daemon thread, raises :class:`InterpreterExiting` instead of starting
    once the interpreter is exiting (other threads have ended or are the one exiting:
    their work goes on)."""
    global _in_flight
    with _units:
        if _exiting and threading.current_thread().daemon:
            raise InterpreterExiting("the interpreter is exiting: background work stops")
        _in_flight += 1
    try:
        yield
    finally:
        with _units:
            _in_flight -= 1
            if not _in_flight:
                _units.notify_all()


def exiting() -> bool:
    """Whether :func:`settle` has run (no new unit of native work starts)."""
    return _exiting


def settle(timeout: float | None = None) -> bool:
    """Start no new unit of native work, and wait (up to ``timeout`` seconds, by default
    :data:`EXIT_GRACE`) for those in flight to end; whether they did. Called at
    interpreter exit; idempotent."""
    global _exiting
    with _units:
        _exiting = True
        return _units.wait_for(lambda: not _in_flight, EXIT_GRACE if timeout is None else timeout)


def _after_fork_in_child() -> None:
    # The child has one thread: units of the parent's other threads are not running here,
    # and the condition's lock may have been held by one of them at the fork.
    global _units, _in_flight, _exiting
    _units = threading.Condition()
    _in_flight = 0
    _exiting = False


atexit.register(settle)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
