"""One write per answer: uvicorn's httptools protocol over a transport that holds each
response head back until the body's first bytes, and sends them together.

uvicorn writes a response's head when the application sends ``http.response.start`` and
its body on each ``http.response.body``: two socket writes, and two wake-ups of the client,
for an answer that is ready at once. Here a head (uvicorn writes one in a single piece
starting ``HTTP/1.1``) waits for the next write and leaves with it: a JSON answer goes out
in one write, an SSE answer's head with its first event when the upstream sent them
together. A head that no body follows in the same event-loop step (an SSE answer whose
first event is still to come) is sent by a callback at the end of the step. Every other
write goes out at once, so a body's bytes have left when the application's ``send``
returns.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Larger bodies are written beside their head (no copy).
_COPY_LIMIT = 64 * 1024


class HeadHoldingTransport:
    """A transport wrapper sending each response head together with what follows it."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        """Write ``data``: a response head is held until the next write or the step's end."""
        held = self._held
        if held is not None:
            self._held = None
            if len(data) < _COPY_LIMIT:
                self._transport.write(held + data)
            else:
                self._transport.writelines([held, data])
        elif data.startswith(b"HTTP/1.1 "):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines``."""
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send a held head now."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        """Send a held head, then close."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping a held head."""
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeadHoldingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol over a :class:`HeadHoldingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Wrap the connection's transport, then set up as uvicorn does."""
        super().connection_made(HeadHoldingTransport(transport, self.loop))  # type: ignore[arg-type]
