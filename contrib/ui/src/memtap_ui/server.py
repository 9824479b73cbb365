"""Serving the memory browser with uvicorn: in the foreground (:func:`serve`, what ``memtap
ui`` does) or in a background thread of the app holding the store (:func:`start`)."""

from __future__ import annotations

from collections.abc import Iterable

import uvicorn

from memtap import Memory
from memtap.sdk.server import ServerThread, StopOnSignal

from .app import create_app
from .config import DEFAULT_HOST, DEFAULT_PORT
from .guard import check_bind

#: Seconds the server waits for pages in progress when told to stop.
STOP_SECONDS = 2


def _config(
    memory: Memory, host: str, port: int, token: str | None, allow_hosts: Iterable[str], log_level: str
) -> uvicorn.Config:
    check_bind(host, token)
    app = create_app(memory, token=token, bound_host=host, allow_hosts=allow_hosts)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="off",
        ws="none",
        server_header=False,
        proxy_headers=False,
        # SIGTERM/Ctrl-C: stop within seconds, not when the slowest page is done.
        timeout_graceful_shutdown=STOP_SECONDS,
    )


def serve(
    memory: Memory,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    allow_hosts: Iterable[str] = (),
    log_level: str = "info",
) -> None:
    """Serve the memory browser over ``memory`` until stopped (Ctrl-C, SIGTERM: then it
    returns, for the caller to close ``memory``). A ``host`` beyond loopback needs a
    ``token`` (``ValueError`` otherwise)."""
    ForegroundServer(_config(memory, host, port, token, allow_hosts, log_level)).run()


class ForegroundServer(StopOnSignal, uvicorn.Server):
    """uvicorn's server, returning from ``run`` on SIGTERM as on SIGINT (``memtap.sdk.server.StopOnSignal``)
    rather than dying by the signal with its Memory open."""


class UIServer(ServerThread):
    """The memory browser served in a daemon thread (see :func:`start`;
    ``memtap.sdk.server.ServerThread``: :meth:`stop`, a context manager)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(uvicorn.Server(config), config.host, config.port, name="memtap-ui", what="memtap UI")

    @property
    def url(self) -> str:
        """The browser's address, ``http://host:port/``."""
        return self.base_url + "/"


def start(
    memory: Memory,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    allow_hosts: Iterable[str] = (),
    log_level: str = "warning",
) -> UIServer:
    """Serve the memory browser over ``memory`` in a background thread of this process (the
    one holding the store: a DuckDB file can be open in one process only) and return at
    once; ``port=0`` takes a free port (see :attr:`UIServer.url`). Stop it with
    :meth:`UIServer.stop`, or use it as a context manager."""
    return UIServer(_config(memory, host, port, token, allow_hosts, log_level)).start()
