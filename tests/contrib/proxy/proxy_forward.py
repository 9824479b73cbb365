"""A minimal HTTP forward proxy on 127.0.0.1 for the upstream client's outbound-proxy tests:
it records each ``CONNECT`` and tunnels it to ``target_port`` on 127.0.0.1, whatever host
was asked for (so a test can use a name no resolver knows), or answers ``refuse``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field


@dataclass
class ForwardProxy:
    """The proxy; use as a context manager. ``connects`` holds each request line and its
    headers (lower-cased names)."""

    target_port: int
    refuse: int | None = None
    connects: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="forward-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, *lines = head.decode("latin-1").split("\r\n")[:-2]
            headers = {}
            for text in lines:
                name, _, value = text.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.connects.append((line.rsplit(" ", 1)[0], headers))
            if self.refuse is not None or not line.startswith("CONNECT "):
                status = self.refuse or 405
                writer.write(b"HTTP/1.1 %d Refused\r\ncontent-length: 0\r\n\r\n" % status)
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()
