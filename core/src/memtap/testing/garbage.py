"""Garbage collection in tests that assert on what collection does (a client let go, a
stream dropped unread and finalised).

One ``gc.collect()`` proves nothing when other threads run Python: CPython's collector
runs one collection at a time, and ``gc.collect()`` called while another thread's
collection is under way (it lets other threads run while finalizers and weakref callbacks
run) returns 0 at once without collecting. A test server's or a writer's thread makes that
a rare, real flake; :func:`collect_garbage` retries until a full collection of its own ran.
"""

from __future__ import annotations

import gc
import threading

from memtap.testing.timing import eventually, slack

__all__ = ["collect_garbage"]


def collect_garbage(timeout: float = 5.0) -> None:
    """Run a full collection in this thread, retrying while another thread's collection
    makes ``gc.collect()`` return without collecting; raise ``AssertionError`` when none
    could run within ``slack(timeout)`` seconds."""
    me = threading.get_ident()
    ran: list[bool] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info.get("generation") == 2 and threading.get_ident() == me:
            ran.append(True)

    def collected() -> bool:
        gc.collect()
        return bool(ran)

    gc.callbacks.append(seen)
    try:
        if not eventually(collected, timeout):
            raise AssertionError(f"no garbage collection could run within {slack(timeout):.1f} s")
    finally:
        gc.callbacks.remove(seen)
