"""Counting work handed to a background thread, so callers can wait until it is done
(what ``flush()`` means for the capture writer, the embedder and memorize alike)."""

from __future__ import annotations

import threading
import time


class PendingWork:
    """A thread-safe count of queued items with a wait for it to reach zero."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    @property
    def count(self) -> int:
        """Items queued and not yet done."""
        return self._count

    def add(self, n: int = 1) -> None:
        """``n`` more items were queued."""
        with self._cond:
            self._count += n

    def done(self, n: int = 1) -> None:
        """``n`` items are finished (stored, dropped or given up on)."""
        with self._cond:
            self._count -= n
            self._cond.notify_all()

    def wait(self, timeout: float | None, *, most: int = 0) -> bool:
        """Wait until at most ``most`` items are pending (by default: none); ``False`` if
        ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._count > most:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True
