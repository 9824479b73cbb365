"""The few ASGI pieces the proxy uses: reading a request body within a limit, sending a
whole response, answering the server's lifespan messages.

The proxy has one catch-all route and builds its responses from raw bytes, so it speaks
ASGI directly instead of through a framework's routing, request and response layers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
RawHeaders = list[tuple[bytes, bytes]]


class RequestTooLarge(Exception):
    """The request body exceeds the configured limit."""


class ClientDisconnected(Exception):
    """The client went away before its request body was complete."""


async def read_body(receive: Receive, headers: RawHeaders, limit: int) -> bytes:
    """The request body; :class:`RequestTooLarge` as soon as it (or its declared
    ``content-length``) exceeds ``limit`` bytes, :class:`ClientDisconnected` if the client
    leaves first."""
    for name, value in headers:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise RequestTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_response(send: Send, status: int, headers: RawHeaders, body: bytes) -> None:
    """Send a whole response (``content-length`` is added here)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", b"%d" % len(body))],
        }
    )
    await send({"type": "http.response.body", "body": body})


def content_type(media_type: str) -> tuple[bytes, bytes]:
    """A ``content-type`` header (``charset=utf-8`` added to ``text/*`` types)."""
    if media_type.startswith("text/") and "charset" not in media_type:
        media_type += "; charset=utf-8"
    return (b"content-type", media_type.encode("latin-1"))


async def lifespan(receive: Receive, send: Send, on_shutdown: Callable[[], Awaitable[None]]) -> None:
    """Answer the server's lifespan messages; ``on_shutdown`` runs at shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return
