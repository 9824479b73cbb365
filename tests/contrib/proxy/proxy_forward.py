"""A minimal HTTP forward proxy on 127.0.0.1 for the upstream client's outbound-proxy tests:
it records each ``CONNECT`` and tunnels it to ``target_port`` on 127.0.0.1, whatever host
was asked for (so a test can use a name no resolver knows), or answers ``refuse``."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from proxy_raw_upstream import LoopServer, read_head


@dataclass
class ForwardProxy(LoopServer):
    """The proxy; use as a context manager. ``connects`` holds each request line and its
    headers (lower-cased names)."""

    target_port: int
    refuse: int | None = None
    connects: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._start_loop("forward-proxy")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, headers = read_head(head)
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
