"""``memtap proxy --workers N``: N processes serving the one port.

Why processes: one proxy process is bound by its GIL (its event loop, the capture writer and
recall share one core). Why not uvicorn's own ``workers=`` mode: it spawns fresh
interpreters that import the app by name, while each worker here needs its own
:class:`memtap.Memory` (connections, background threads, the feed), made after it starts,
and the proxy's own server class (clean SIGTERM, client limits). So this module does what
uvicorn's supervisor does, the pre-fork way: the parent binds the listening socket once (a
port in use is reported once, before anything starts), forks N workers that each accept
connections on it (the kernel hands each connection to one of them: no relay in front), and
then only supervises. It opens no store and starts no thread before forking.

Stopping: SIGTERM or SIGINT to the parent is passed to every worker as SIGTERM (workers have
their own process group, so a Ctrl-C in a terminal reaches them once, through the parent);
each finishes its requests under way (``--drain-timeout``), closes its Memory and exits 0;
the parent exits when all have, killing any still running ``drain_timeout`` + 10 s later. A
worker that dies is started again (not when they keep dying at once). A worker whose parent
is gone (``kill -9``) stops by itself.

The workers share their store, so it must be one several processes can use at once, that
tells each what the others wrote (a change feed: PostgreSQL); a DuckDB file (one process
holds it) or an in-memory store (one per process) is refused.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType

from memtap.sdk.storage import duckdb_path

from .config import ProxyConfig

log = logging.getLogger("memtap.proxy")

#: Seconds a worker must have run for its death to be taken as a crash to recover from
#: (a worker dying sooner, twice in a row, stops them all: it will not start).
MIN_UPTIME = 2.0
#: Seconds past the drain timeout before workers still running are killed.
KILL_GRACE = 10.0


def check_shared_store(url: str | None, workers: int) -> None:
    """Raise ``ValueError`` (one line) when ``workers`` > 1 and ``url`` names a store that
    several processes cannot share (``None``: the default store, a DuckDB file)."""
    if workers <= 1:
        return
    scheme = (url or "").split(":", 1)[0].lower()
    single = "an in-memory store lives in one process" if scheme == "memory" else None
    if url is None or duckdb_path(url) is not None:
        single = "a DuckDB file is open in one process at a time"
    if single:
        raise ValueError(
            f"--workers {workers} needs a store the workers can share, such as postgresql://...; "
            f"{single} (use --workers 1, or --store postgresql://...)"
        )


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A socket listening on ``host:port``, inherited by the workers."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Forks the workers (``run_worker(sock)`` in each) and watches them."""

    def __init__(
        self, config: ProxyConfig, workers: int, run_worker: Callable[[socket.socket, int], None]
    ) -> None:
        self.config = config
        self.count = workers
        self.run_worker = run_worker
        self.sock = listening_socket(config.host, config.port)
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (worker number, started)
        self.stopping: float | None = None
        self.quick_deaths = 0

    def _fork(self, number: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                os.setpgid(0, 0)
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                self.run_worker(self.sock, parent)
                code = 0
            except BaseException:
                log.exception("memtap proxy worker %d failed", number)
            finally:
                logging.shutdown()
                os._exit(code)
        self.children[pid] = (number, time.monotonic())

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        if self.stopping is None:
            log.info(
                "memtap proxy stopping (%s): %d workers finish requests under way",
                signal.Signals(sig).name,
                len(self.children),
            )
            self.stopping = time.monotonic()
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, sig: int) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def run(self) -> int:
        """Start the workers and supervise them until they have all stopped; the exit
        status (0: every worker stopped cleanly)."""
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        for number in range(self.count):
            self._fork(number)
        # The parent keeps its copy of the socket (never accepting on it) for a worker it
        # may have to start again.
        try:
            failed = self._watch()
        finally:
            self.sock.close()
        return 1 if failed else 0

    def _watch(self) -> bool:
        failed = False
        while self.children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                if self.stopping is not None and time.monotonic() - self.stopping > (
                    self.config.drain_timeout + KILL_GRACE
                ):
                    log.warning("memtap proxy: killing %d workers that did not stop", len(self.children))
                    self._signal_all(signal.SIGKILL)
                    failed = True
                    self.stopping = time.monotonic()  # once more at most
                time.sleep(0.1)
                continue
            number, started = self.children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping is not None:
                failed = failed or code != 0
                continue
            log.error("memtap proxy worker %d (pid %d) exited with %s", number, pid, code)
            self.quick_deaths = self.quick_deaths + 1 if time.monotonic() - started < MIN_UPTIME else 0
            if self.quick_deaths >= 2:
                log.error("memtap proxy: workers keep dying at start; stopping")
                self.stopping = time.monotonic()
                self._signal_all(signal.SIGTERM)
                failed = True
                continue
            self._fork(number)
        return failed


def serve_workers(
    config: ProxyConfig,
    workers: int,
    run_worker: Callable[[socket.socket, int], None],
) -> int:
    """Serve with ``workers`` processes (see the module docstring); the exit status."""
    if sys.platform == "win32":  # pragma: no cover
        raise ValueError("--workers needs fork (Linux, macOS)")
    return Supervisor(config, workers, run_worker).run()
