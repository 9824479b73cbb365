"""Background threads yield the CPU to the request path.

memtap's heavy background work (embedding facts, extracting them with an LLM port,
building the quick query table) runs in threads of the application's own process. On a
small machine such a thread competes with the threads serving requests for the same
cores; Linux gives each thread its own nice value, so the worker lowers its own.
"""

from __future__ import annotations

import os
import threading
import time

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


# -- calls in flight ----------------------------------------------------------------------
#
# A background thread holding the GIL in a long C call (a tokenizer parsing its file, an
# extension module being imported) stops every request thread of the process until it
# returns, however low its CPU priority. One-off loading work therefore runs its GIL-heavy
# steps between calls: each step first waits (bounded) until no call is in flight.

_in_flight = 0
#: How many calls have started in this process (tells a quiet moment from a busy one).
_started = 0
_quiet = threading.Condition()


def call_started() -> None:
    """An intercepted LLM call began (see :func:`wait_for_quiet`)."""
    global _in_flight, _started
    with _quiet:
        _in_flight += 1
        _started += 1


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
