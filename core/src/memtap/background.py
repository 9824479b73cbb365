"""Background threads yield the CPU to the request path.

memtap's heavy background work (embedding facts, extracting them with an LLM port,
building the quick query table) runs in threads of the application's own process. On a
small machine such a thread competes with the threads serving requests for the same
cores; Linux gives each thread its own nice value, so the worker lowers its own.
"""

from __future__ import annotations

import os
import threading

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
