"""Threads in tests: holding a thread's start, to reach what happens while it is starting.

memtap's workers start their thread on first use, from whatever thread submits work; a
close, or a wait, that comes while that start has not returned must neither fail nor miss
the thread. :func:`held_start` makes that moment last as long as a test needs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HeldStart", "held_start"]


class HeldStart:
    """The start of threads named :attr:`name`, held: :attr:`starting` is set when one is
    being started, and its ``start()`` returns only after :meth:`release`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.starting = threading.Event()
        self._go = threading.Event()

    def release(self) -> None:
        """Let the held start (and any later one) go on."""
        self._go.set()

    def _hold(self, thread: threading.Thread, timeout: float = 10.0) -> None:
        if thread.name == self.name:
            self.starting.set()
            self._go.wait(timeout)


@contextmanager
def held_start(name: str) -> Iterator[HeldStart]:
    """While the block runs, ``threading.Thread.start`` of a thread named ``name`` waits,
    in the thread starting it, until the block calls :meth:`HeldStart.release` (at most
    10 s; released at the end of the block in any case). Other threads start as usual."""
    held = HeldStart(name)
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        held._hold(thread)
        real_start(thread)

    threading.Thread.start = start  # type: ignore[method-assign, assignment]
    try:
        yield held
    finally:
        held.release()
        threading.Thread.start = real_start  # type: ignore[method-assign]
