"""What the proxy does with a finished call before the client can have the whole answer.

Journaled before answered (docs/proxy.md, "Journaled before answered"): a call is captured
(its record written to the spool: one ``write`` to the page cache, which a ``kill -9``
does not undo) before the bytes that complete its answer are sent. On a store other
processes share (PostgreSQL: ``--workers``, or several proxies behind a load balancer),
the proxy also waits, a bounded time, until the capture writer has *stored* the call
(group commit: the writer stops lingering for a batch while a call waits, and every call
it stores in a batch is released at once); with every process asking the store for a
session's latest exchange before its next call (:attr:`memtap.history.injector.SessionHistories.latest`),
a follow-up served by any process sees every turn whose answer the client has.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from memtap import Memory
from memtap.sdk import Attribution, Call, Exchange

log = logging.getLogger("memtap.proxy")

#: Seconds a call's answer waits for its exchange to be stored (a shared store only); past
#: that it is sent anyway (fail open: the call is journaled and stored later), and later
#: calls do not wait until the writer stores again (a failing store slows one call).
COMMIT_DEADLINE = 1.0


def shares_store(memory: Memory) -> bool:
    """Whether other processes may write to and read from ``memory``'s store (it has a
    change feed: PostgreSQL), so that a session's turns must be stored before they are
    answered to be seen by the process serving the next one."""
    return getattr(memory.store, "watch_changes", None) is not None


class Commits:
    """Captures a finished call before its last bytes; on a shared store, waits until the
    call is stored (see the module docstring). Made on the serving event loop's side of
    the proxy; the capture writer's thread reports stored calls through ``on_written``."""

    def __init__(self, memory: Memory, *, shared: bool | None = None) -> None:
        self.memory = memory
        #: Whether calls are committed to the store before they are answered.
        self.shared = shares_store(memory) if shared is None else shared
        self._waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = {}
        #: A call's commit was late: calls do not wait until the writer stores a batch again.
        self.behind = False
        if self.shared:
            memory.writer.on_written.append(self._written)
            memory.histories.latest = self._latest

    def _latest(self, attribution: Attribution) -> str | None:
        """The id of the session's latest stored exchange (``None``: none stored, or the
        store is not storing calls in time: not asked)."""
        if self.behind:
            return None
        last = self.memory.store.history(attribution.session_id, entity_id=attribution.entity_id, limit=1)
        return last[-1].exchange_id if last else None

    def _written(self, exchanges: Sequence[Exchange]) -> None:
        """The writer stored ``exchanges`` (its thread): release the calls waiting for them."""
        self.behind = False
        waiting = self._waiting
        if not waiting:
            return
        for exchange in exchanges:
            found = waiting.pop(exchange.id, None)
            if found is not None:
                loop, future = found
                loop.call_soon_threadsafe(_release, future)

    async def finish(self, call: Call, capture: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:
        """Run ``capture()`` (which finishes ``call``: journals and queues it); on a shared
        store, then wait until the call is stored, at most :data:`COMMIT_DEADLINE`."""
        if not self.shared or self.behind or self.memory.histories.store_late:
            capture()  # a store not answering in time is not waited for
            return
        future: asyncio.Future[None] = loop.create_future()
        self._waiting[call.id] = (loop, future)
        try:
            with self.memory.writer.hurried():
                capture()
                item = call.captured
                if item is None or item.formatted() is None:
                    return  # nothing to store (a failed call, or one that cannot be formatted)
                await asyncio.wait_for(future, COMMIT_DEADLINE)
        except asyncio.TimeoutError:
            if not self.behind:
                self.behind = True
                log.warning(
                    "memtap proxy: a call was not stored within %.1f s; answering calls without "
                    "waiting for the store until it stores again (they are journaled and stored "
                    "later; a session's next turn on another process may miss them meanwhile)",
                    COMMIT_DEADLINE,
                )
        finally:
            self._waiting.pop(call.id, None)


def _release(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
