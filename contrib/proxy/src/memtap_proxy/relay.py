"""Relaying an upstream answer to the client while memtap reads it on the side.

:class:`StreamRelay` is an ASGI response that forwards an SSE stream chunk by chunk (each
chunk is sent as soon as it arrives: no buffering), feeds the stream's events to the
:class:`~memtap.tap.Call`, and reports the end exactly once: finished, cut by the client
(``partial``), or failed upstream (``error``; the client's connection is then closed
without the stream's terminator, as the upstream's failure would have done).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
from starlette.types import Message, Receive, Scope, Send

from memtap.tap import Call
from memtap.wire import WireProtocol

from .sse import SSEEvent, SSEParser

log = logging.getLogger("memtap.proxy")


def json_or_none(raw: Any) -> Mapping[str, Any] | None:
    """Parse an answer or an event's data (off the request path, in the capture writer)."""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, Mapping) else None


class StreamRelay:
    """ASGI response relaying one upstream SSE stream to the client.

    ``call`` is ``None`` for a stream memtap only passes through. With ``hide_usage``, the
    usage-only event memtap asked for (``protocol.is_hidden_usage_event``) is dropped: the
    bytes of an unfinished event are then held until the event is complete.
    """

    def __init__(
        self,
        upstream: httpx.Response,
        headers: list[tuple[bytes, bytes]],
        *,
        call: Call | None = None,
        protocol: WireProtocol | None = None,
        hide_usage: bool = False,
    ) -> None:
        self.upstream = upstream
        self.headers = headers
        self.call = call
        self.protocol = protocol
        self.hide_usage = hide_usage and protocol is not None and call is not None
        self.parser = SSEParser()
        self.client_gone = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the stream; watch for the client going away meanwhile."""
        try:
            async with anyio.create_task_group() as group:

                async def watch() -> None:
                    while True:
                        message: Message = await receive()
                        if message["type"] == "http.disconnect":
                            self.client_gone = True
                            group.cancel_scope.cancel()
                            return

                group.start_soon(watch)
                await self._pump(send)
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()

    async def _pump(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.upstream.status_code, "headers": self.headers}
        )
        try:
            async for chunk in self.upstream.aiter_raw():
                # Events are recorded before their bytes go out, so that a stream's capture
                # is queued before the client can see its terminal event (SDKs stop reading
                # there and the app's next call must find this turn in the history).
                if self.hide_usage:
                    out = self._visible(self.parser.feed(chunk))
                    if out:
                        await send({"type": "http.response.body", "body": out, "more_body": True})
                else:
                    self._record(self.parser.feed(chunk))
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            tail = self.parser.close()
            if self.hide_usage:
                out = self._visible(tail)
                if out:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            else:
                self._record(tail)
        except httpx.HTTPError as exc:
            log.warning("upstream stream failed: %s", type(exc).__name__)
            self._finish(error=exc)
            return  # no terminator: the client sees the stream cut, as the upstream cut it
        except BaseException:
            self._finish(partial=True)  # the client went away (or we are shutting down)
            raise
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._finish()

    def _record(self, events: list[SSEEvent]) -> None:
        call = self.call
        if call is None:
            return
        for event in events:
            if event.data is not None and event.data != "[DONE]":
                call.stream_item(event.data)
            if _is_terminal(event):
                self._finish()

    def _visible(self, events: list[SSEEvent]) -> bytes:
        out = bytearray()
        for event in events:
            data = event.data
            if data is not None and data != "[DONE]":
                assert self.call is not None and self.protocol is not None
                self.call.stream_item(data)
                if '"usage"' in data and self.protocol.is_hidden_usage_event(json_or_none(data)):
                    continue
            if _is_terminal(event):
                self._finish()
            out += event.raw
        return bytes(out)

    def _finish(self, *, error: BaseException | None = None, partial: bool = False) -> None:
        if self.call is None:
            return
        try:
            self.call.stream_finished(json_or_none, error=error, partial=partial or self.client_gone)
        except Exception:
            log.exception("memtap could not capture a streamed answer")


#: Events after which a stream has said everything (OpenAI chat, Anthropic, Responses).
TERMINAL_EVENTS = frozenset({"message_stop", "response.completed", "response.incomplete", "response.failed"})


def _is_terminal(event: SSEEvent) -> bool:
    """Whether ``event`` ends its stream: clients stop reading there."""
    return event.data == "[DONE]" or event.event in TERMINAL_EVENTS
