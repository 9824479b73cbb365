"""Running an ASGI server for memtap's surfaces (``memtap proxy``, ``memtap ui``, ``memtap
mcp --http``): uvicorn in a background thread of this process (:class:`ServerThread`), and
a stop on SIGTERM as on Ctrl-C (:class:`StopOnSignal`).

uvicorn is imported by the surfaces, never here: core does not depend on it.
"""

from __future__ import annotations

import socket
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import uvicorn

__all__ = ["START_SECONDS", "STOP_SECONDS", "ServerThread", "StopOnSignal"]

#: How long :meth:`ServerThread.start` waits for the server to accept connections.
START_SECONDS = 10.0
#: How long :meth:`ServerThread.stop` waits for the server's thread to end.
STOP_SECONDS = 10.0

_T = TypeVar("_T", bound="ServerThread")


class StopOnSignal:
    """A mixin for ``uvicorn.Server`` (listed before it) that stops the same way on SIGTERM
    and SIGINT: stop accepting, let requests under way finish, and return from ``run`` so
    that the caller closes its Memory and the process exits 0. uvicorn itself re-raises
    the signal once it has shut down: on SIGTERM (systemd, docker, Kubernetes) the process
    then died by the signal before the Memory was closed. A second signal forces an
    immediate stop. :meth:`stopping` is told of the first."""

    should_exit: bool
    force_exit: bool

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Note a stop request (uvicorn calls this from its signal handler)."""
        if self.should_exit:
            self.force_exit = True
        else:
            self.stopping(sig)
        self.should_exit = True

    def stopping(self, sig: int) -> None:
        """The first stop request arrived (``sig``); nothing by default (e.g. log it)."""


class ServerThread:
    """A uvicorn ``server`` run in a daemon thread of this process, on a socket bound to
    ``host:port`` before it starts (``port=0``: a free one, see :attr:`port`).

    :meth:`start` returns once the server accepts connections, and raises ``RuntimeError``
    (naming ``what``) if it does not within :data:`START_SECONDS` or its thread ends first
    (the server is then stopped and the socket closed). :meth:`stop` asks the server to
    stop, waits for its thread and closes the socket; it may be called more than once.
    As a context manager it is started (unless it already is) and stopped.
    """

    def __init__(self, server: uvicorn.Server, host: str, port: int, *, name: str, what: str) -> None:
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
        except BaseException:
            self._sock.close()
            raise
        #: The address it listens on.
        self.host = host
        #: The port it listens on (a free one when 0 was asked for).
        self.port: int = self._sock.getsockname()[1]
        self.server = server
        self.what = what
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [self._sock]}, name=name, daemon=True
        )

    @property
    def base_url(self) -> str:
        """``http://host:port`` (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def started(self) -> bool:
        """Whether :meth:`start` has started the thread."""
        return self._thread.ident is not None

    def start(self: _T) -> _T:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self.what} did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        if self.started:
            self._thread.join(STOP_SECONDS)
        self._sock.close()

    def __enter__(self: _T) -> _T:
        return self if self.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
