"""Request work within a deadline (the UI's pages, the MCP server's tools): the work (store
reads) runs in a daemon thread; a request not done by the deadline answers at once (the
work finishes in the background, its result dropped), and while a few works of one kind
are overdue, that kind is refused without starting more.

So no request waits longer than the deadline, and the work (memory, store load) a client can
start is bounded however often it retries a slow request. Daemon threads: a read stuck on a
store must not keep a server from stopping (``concurrent.futures`` joins its workers at exit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .background import DaemonPool

T = TypeVar("T")


class Overdue(Exception):
    """The work did not finish within the deadline (or too many works of its kind are
    overdue already: ``started`` is ``False``)."""

    def __init__(self, kind: str, deadline: float, started: bool) -> None:
        super().__init__(f"{kind}: not done within {deadline:g} s")
        self.kind = kind
        self.deadline = deadline
        self.started = started


class BoundedWork:
    """Runs functions in daemon threads with a deadline (see the module doc)."""

    def __init__(
        self, deadline: float, max_overdue: int, *, workers: int = 8, name: str = "memtap-bounded"
    ) -> None:
        self.deadline = deadline
        self.max_overdue = max_overdue
        self._pool = DaemonPool(workers, name)
        self._lock = threading.Lock()
        self._overdue: dict[str, int] = {}

    async def run(self, kind: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``'s result, or :class:`Overdue` when the deadline passed."""
        import asyncio  # on a coroutine's first use, not at `import memtap` (the command line)

        with self._lock:
            if self._overdue.get(kind, 0) >= self.max_overdue:
                raise Overdue(kind, self.deadline, started=False)
        future = self._pool.submit(lambda: fn(*args, **kwargs))
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.deadline)
        except asyncio.TimeoutError:
            with self._lock:
                self._overdue[kind] = self._overdue.get(kind, 0) + 1
            future.add_done_callback(lambda _: self._done(kind))
            raise Overdue(kind, self.deadline, started=True) from None

    def _done(self, kind: str) -> None:
        with self._lock:
            self._overdue[kind] -= 1
