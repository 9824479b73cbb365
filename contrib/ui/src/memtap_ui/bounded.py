"""Page work within a deadline: a page's store reads run in a daemon thread; a page not done
by the deadline answers at once (the work finishes in the background, its result dropped),
and while a few works of one page are overdue, that page is refused without starting more.

So no request waits longer than the deadline, and the work (memory, store load) a client can
start is bounded however often it reloads a slow page. Daemon threads: a read stuck on a
store must not keep the UI from stopping (``concurrent.futures`` joins its workers at exit).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from memtap.workers.background import DaemonPool

T = TypeVar("T")


class Overdue(Exception):
    """The page's work did not finish within the deadline (or too many of its works are
    overdue already: ``started`` is ``False``)."""

    def __init__(self, page: str, deadline: float, started: bool) -> None:
        super().__init__(f"{page}: not done within {deadline:g} s")
        self.page = page
        self.deadline = deadline
        self.started = started


class BoundedPages:
    """Runs page functions in daemon threads with a deadline (see the module doc)."""

    def __init__(self, deadline: float, max_overdue: int, workers: int = 8) -> None:
        self.deadline = deadline
        self.max_overdue = max_overdue
        self._pool = DaemonPool(workers, "memtap-ui-page")
        self._lock = threading.Lock()
        self._overdue: dict[str, int] = {}

    async def run(self, page: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``'s result, or :class:`Overdue` when the deadline passed."""
        with self._lock:
            if self._overdue.get(page, 0) >= self.max_overdue:
                raise Overdue(page, self.deadline, started=False)
        future = self._pool.submit(lambda: fn(*args, **kwargs))
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.deadline)
        except asyncio.TimeoutError:
            with self._lock:
                self._overdue[page] = self._overdue.get(page, 0) + 1
            future.add_done_callback(lambda _: self._done(page))
            raise Overdue(page, self.deadline, started=True) from None

    def _done(self, page: str) -> None:
        with self._lock:
            self._overdue[page] -= 1
