"""A client-side deadline for statements: what ends a wait on a frozen connection.

libpq has no read timeout. The server's ``statement_timeout`` cancels slow statements, and
TCP keepalives notice a peer that is gone; neither helps when the server process or a
middlebox freezes with the connection open (its kernel still acknowledges data and
keepalive probes), and then a thread waits forever. psycopg offers no per-query timeout
either (its cancel travels over a new connection, through the same frozen path), so this
is hand-written: one thread watches the connections in use and shuts down the socket of
one whose deadline passed. The waiting thread then gets an ``OperationalError``, and the
pool throws the broken connection away.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("memtap.postgres")


def cut(conn: Any) -> bool:
    """Shut down ``conn``'s socket (both ways) without closing its descriptor, which
    libpq still owns; ``False`` when the connection has no socket any more."""
    try:
        fd = conn.pgconn.socket
    except Exception:
        return False
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return False
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()  # the descriptor stays libpq's
    return True


class Watchdog:
    """Shuts down connections whose :meth:`watch` block outlives its limit."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._watched: dict[int, tuple[float, Any, str]] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: How many connections were cut (for tests and logs).
        self.cuts = 0

    @contextlib.contextmanager
    def watch(self, conn: Any, limit: float | None, action: str) -> Iterator[None]:
        """Within the block, ``conn`` is cut if the block lasts more than ``limit``
        seconds (``None``: not watched)."""
        if limit is None:
            yield
            return
        token = next(self._ids)
        with self._cond:
            self._watched[token] = (time.monotonic() + limit, conn, f"{action} (no answer in {limit:g} s)")
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=f"{self._name}-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._watched.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = time.monotonic()
                due = [(token, entry) for token, entry in self._watched.items() if entry[0] <= now]
                if not due:
                    nearest = min((entry[0] for entry in self._watched.values()), default=None)
                    self._cond.wait(None if nearest is None else nearest - now)
                    continue
                # Cut while holding the lock: a block that ends meanwhile waits for it, so a
                # connection already given back to the pool (and reused) is never cut.
                actions = []
                for token, (_, conn, action) in due:
                    del self._watched[token]
                    if cut(conn):
                        self.cuts += 1
                        actions.append(action)
            for action in actions:
                log.warning(
                    "memtap: PostgreSQL stopped answering while %s; closed that connection "
                    "(a frozen server or network?)",
                    action,
                )

    def close(self) -> None:
        """Stop watching (the thread ends)."""
        with self._cond:
            self._closed = True
            self._watched.clear()
            self._cond.notify()
