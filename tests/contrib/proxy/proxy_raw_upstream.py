"""A raw HTTP/1.1 upstream on 127.0.0.1 whose every byte, pause and hang-up is scripted.

Each request is answered by ``RawUpstream.script(request)``, a list of steps: ``bytes`` are
written (and flushed) as they are, a ``float`` sleeps that many seconds, a
``threading.Event`` is waited for, ``CLOSE`` hangs up. The server records every request,
counts connections, and notes connections the peer closed while an answer was going out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

CLOSE = object()
Step = Any  # bytes | float | threading.Event | CLOSE


@dataclass
class Seen:
    """One request as the upstream read it."""

    method: str
    target: str
    headers: dict[str, str]
    raw_head: bytes
    body: bytes
    connection: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def head(status: int = 200, headers: Sequence[tuple[str, str]] = (), reason: str = "OK") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def json_answer(obj: Any, status: int = 200) -> list[Step]:
    body = json.dumps(obj).encode()
    return [head(status, [("content-type", "application/json"), ("content-length", str(len(body)))]) + body]


SSE_HEAD = head(200, [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")])
END = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """``data`` as one piece of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_answer(
    pieces: Sequence[bytes], *, pause: float = 0.0, gate: threading.Event | None = None
) -> list[Step]:
    """A chunked SSE answer, one chunk per piece (``pause`` between pieces, ``gate`` awaited
    before the second)."""
    steps: list[Step] = [SSE_HEAD]
    for i, piece in enumerate(pieces):
        if i == 1 and gate is not None:
            steps.append(gate)
        if i and pause:
            steps.append(pause)
        steps.append(chunk(piece))
    steps.append(END)
    return steps


class LoopServer:
    """A TCP server on 127.0.0.1 with its own event loop in a thread; use as a context
    manager. A subclass calls :meth:`_start_loop` when built and serves each connection in
    ``_serve``; ``port`` is known once entered, ``tls`` (if set) wraps every connection."""

    port: int = 0
    tls: ssl.SSLContext | None = None

    def _start_loop(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def __enter__(self: _S) -> _S:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            # Let the cancelled connections finish here: left pending, they would run their
            # clean-up when collected, on a closed loop, in the middle of a later test.
            await asyncio.wait(tasks, timeout=5)


_S = TypeVar("_S", bound=LoopServer)


def read_head(raw_head: bytes) -> tuple[str, dict[str, str]]:
    """A request head's first line and its headers (names lower-cased)."""
    first, *lines = raw_head.decode("latin-1").split("\r\n")[:-2]
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return first, headers


def tls_contexts(hostname: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for ``hostname`` and a client context that
    trusts it (a throwaway CA from trustme; the test is skipped without trustme)."""
    import pytest

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(hostname).configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


@dataclass
class RawUpstream(LoopServer):
    """The server; use as a context manager. ``url`` is its base URL."""

    script: Callable[[Seen], list[Step]] = field(default=lambda seen: json_answer({"ok": True}))
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    peer_closed: int = 0
    pipelined: int = 0
    port: int = 0
    tls: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        self._start_loop("raw-upstream")

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    raw_head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                request_line, headers = read_head(raw_head)
                method, target, _ = request_line.split(" ", 2)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                seen = Seen(method, target, headers, raw_head, body, number)
                self.requests.append(seen)
                if not await self._answer(self.script(seen), reader, writer):
                    return
        finally:
            writer.close()

    async def _answer(
        self, steps: list[Step], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Play ``steps``; ``False`` once the connection is done with."""
        # A client sends nothing while its answer is going out: a read that returns meanwhile
        # means the peer hung up (or pipelined a request, which the proxy must not do).
        hangup = asyncio.ensure_future(reader.read(1))
        try:
            keep = await self._play(steps, writer, hangup)
        finally:
            if not hangup.done():
                hangup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hangup
        if hangup.done() and not hangup.cancelled() and hangup.exception() is None and hangup.result():
            self.pipelined += 1
            return False
        return keep

    async def _play(
        self, steps: list[Step], writer: asyncio.StreamWriter, hangup: asyncio.Future[bytes]
    ) -> bool:
        for step in steps:
            if step is CLOSE:
                return False
            if isinstance(step, bytes):
                if hangup.done():
                    self.peer_closed += 1
                    return False
                writer.write(step)
                try:
                    await writer.drain()
                except ConnectionError:
                    self.peer_closed += 1
                    return False
            elif isinstance(step, (float, int)):
                await asyncio.sleep(step)
            else:
                while not step.is_set() and not hangup.done():
                    await asyncio.sleep(0.002)
        return True
