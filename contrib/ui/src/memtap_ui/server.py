"""Serving the memory browser with uvicorn: in the foreground (:func:`serve`, what ``memtap
ui`` does) or in a background thread of the app holding the store (:func:`start`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable

import uvicorn

from memtap import Memory

from .app import create_app
from .guard import check_bind

#: Seconds the server waits for pages in progress when told to stop.
STOP_SECONDS = 2
#: Default listening address and port.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8097


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
    """Serve the memory browser over ``memory`` until interrupted (Ctrl-C). A ``host``
    beyond loopback needs a ``token`` (``ValueError`` otherwise)."""
    uvicorn.Server(_config(memory, host, port, token, allow_hosts, log_level)).run()


class UIServer:
    """The memory browser served in a daemon thread (see :func:`start`)."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((config.host, config.port))
        #: The port it listens on (a free one when 0 was asked for).
        self.port: int = self._sock.getsockname()[1]
        self.host = config.host
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, name="memtap-ui", daemon=True
        )

    @property
    def url(self) -> str:
        """The browser's address, ``http://host:port/``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> UIServer:
        """Start serving; returns once connections are accepted."""
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the memtap UI did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    def __enter__(self) -> UIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
