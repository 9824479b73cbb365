"""Running the proxy under uvicorn: in the foreground (:func:`serve`, what ``memtap proxy``
does) or in a background thread on any free port (:class:`ProxyThread`, for tests and
benchmarks)."""

from __future__ import annotations

import gc
import logging
import math
import os
import signal
import socket
import sys
from typing import Any

import uvicorn

from memtap import HistoryBudget, Memory
from memtap.sdk import ServerThread, StopOnSignal

from .app import Proxy
from .config import UI_PREFIX, ProxyConfig, check_bind
from .limits import ClientLimits, bounded_protocol

log = logging.getLogger("memtap.proxy")
#: GIL switch interval (seconds) of a process serving the proxy.
SWITCH_INTERVAL = 0.0005


def _uvicorn_config(app: Any, config: ProxyConfig, log_level: str) -> uvicorn.Config:
    limits = ClientLimits(
        header_timeout=config.header_timeout,
        body_timeout=config.body_timeout,
        idle_timeout=config.idle_timeout,
        max_clients=config.max_clients,
    )
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        # One write per answer that is ready at once; client timeouts and a connection bound.
        http=bounded_protocol(limits),
        ws="none",  # the proxy speaks no WebSocket: an Upgrade is not taken up
        server_header=False,
        date_header=False,
        timeout_keep_alive=math.ceil(config.idle_timeout),  # limits closes idle ones first
        timeout_graceful_shutdown=math.ceil(config.drain_timeout),
        proxy_headers=False,  # clients talk to the proxy directly: no forwarded-for to trust
    )


class ProxyServer(StopOnSignal, uvicorn.Server):
    """uvicorn's server, stopping the same way on SIGTERM and SIGINT (``memtap.sdk.StopOnSignal``):
    stop accepting, let requests under way finish (``drain_timeout``), close the upstream
    connections, and return from :meth:`run` so that the caller closes its Memory and the
    process exits 0. A second signal forces an immediate stop.
    """

    #: A worker's parent (``memtap proxy --workers``): when it is gone, the worker stops.
    parent_pid: int | None = None

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s); a worker also stops once its parent is gone."""
        if self.parent_pid is not None and counter % 10 == 0 and os.getppid() != self.parent_pid:
            if not self.should_exit:
                log.warning("memtap proxy worker stopping: its parent process is gone")
            self.should_exit = True
        return await super().on_tick(counter)

    def stopping(self, sig: int) -> None:
        """Log the first stop request."""
        log.info("memtap proxy stopping (%s): finishing requests under way", signal.Signals(sig).name)


def open_memory(store: str | None, history_messages: int | None = None) -> Memory:
    """The :class:`memtap.Memory` behind a proxy (``store`` URL, or the default store)."""
    budget = HistoryBudget(max_messages=history_messages) if history_messages is not None else None
    return Memory(store, history=budget)


#: Allocations (net of frees) between the collector's youngest-generation passes. Python's
#: 700 suits small programs: parsing one agent's 50 KB request makes thousands of objects
#: that live until its answer, and each pass meanwhile scanned them and pushed them into the
#: older generations, to be scanned again (~0.06 ms per request, and a full collection of
#: the whole heap now and then).
GC_YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Set up the garbage collector for a server process: what exists once it has started
    (modules, plugins, the store) is frozen out of every later collection, and the youngest
    generation is collected every :data:`GC_YOUNG_THRESHOLD` allocations. Only for a process
    the proxy owns (``memtap proxy``), never for an app that embeds it."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def serve(
    config: ProxyConfig,
    memory: Memory,
    *,
    log_level: str = "info",
    sock: socket.socket | None = None,
    parent_pid: int | None = None,
) -> None:
    """Run the proxy until interrupted (refuses a non-loopback address without a token).
    A worker of ``memtap proxy --workers`` (:mod:`memtap_proxy.workers`) accepts on the
    listening ``sock`` it inherited and stops when ``parent_pid`` is no longer its parent."""
    check_bind(config)
    # The capture writer formats and stores in a background thread; a short GIL switch
    # interval keeps it from holding the event loop's thread for 5 ms at a time.
    sys.setswitchinterval(SWITCH_INTERVAL)
    proxy = Proxy(config, memory)
    tune_gc()
    families = [f for f in ("openai", "anthropic", "gemini") if config.upstream(f)]
    log.info(
        "memtap proxy on http://%s:%d (store %s; upstreams: %s)",
        config.host,
        config.port,
        memory.url,
        ", ".join(f"{f} -> {config.upstream(f)}" for f in families) or "none configured",
    )
    if proxy.ui is not None:
        log.info("memtap memory browser on http://%s:%d%s/", config.host, config.port, UI_PREFIX)
    server = ProxyServer(_uvicorn_config(proxy.app, config, log_level))
    server.parent_pid = parent_pid
    server.run(sockets=[sock] if sock is not None else None)


class ProxyThread(ServerThread):
    """A proxy served by uvicorn in a daemon thread, on ``127.0.0.1`` and a free port
    (``memtap.sdk.ServerThread``: :meth:`start`, :meth:`stop`).

    Use as a context manager; :attr:`url` is ``http://127.0.0.1:<port>``.
    """

    def __init__(self, proxy: Proxy, *, log_level: str = "warning") -> None:
        self.proxy = proxy
        server = ProxyServer(_uvicorn_config(proxy.app, proxy.config, log_level))
        super().__init__(server, "127.0.0.1", 0, name="memtap-proxy", what="memtap proxy")

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return self.base_url
