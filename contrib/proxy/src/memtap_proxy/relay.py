"""Relaying an upstream answer to the client while memtap reads it on the side.

:class:`StreamRelay` is an ASGI response that forwards an SSE stream chunk by chunk (each
chunk is sent as soon as it arrives: no buffering), feeds the stream's events to the
:class:`~memtap.request.tap.Call`, and reports the end exactly once: finished, cut by the client
(``partial``), or failed upstream (``error``; the client's connection is then closed
without the stream's terminator, as the upstream's failure would have done).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Mapping
from typing import Any, cast

from memtap.sdk import Call, WireProtocol

from .arrays import END_OF_ARRAY, ArrayEvents
from .asgi import Message, RawHeaders, Receive, Send
from .commit import Commits
from .sse import SSEEvent, SSEParser
from .upstream import ReaderGone, UpstreamError, UpstreamResponse

log = logging.getLogger("memtap.proxy")


def json_or_none(raw: Any) -> Mapping[str, Any] | None:
    """Parse an answer or an event's data (off the request path, in the capture writer)."""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, Mapping) else None


class StreamRelay:
    """Relays one upstream answer to the client as it arrives (SSE, or anything passed
    through).

    ``call`` is ``None`` for an answer memtap only passes through. With ``hide_usage``, the
    usage-only event memtap asked for (``protocol.is_hidden_usage_event``) is dropped: the
    bytes of an unfinished event are then held until the event is complete. ``array``
    reads a stream sent as one JSON array instead of SSE (:mod:`memtap_proxy.arrays`; its
    bytes always go out as they came).

    The client going away is noticed by a waiting ``receive()`` (a bare task, no task
    group); the upstream answer is then abandoned and the capture marked ``partial``.
    A stream's capture is journaled (with ``commits`` on a shared store, stored too:
    :class:`~memtap_proxy.commit.Commits`) before the bytes that end it go out: the chunk
    holding its terminal event, or the end of the body; so a client that has the whole
    answer finds the turn journaled, and its next request finds it in the history.
    """

    def __init__(
        self,
        upstream: UpstreamResponse,
        headers: RawHeaders,
        *,
        call: Call | None = None,
        protocol: WireProtocol | None = None,
        hide_usage: bool = False,
        commits: Commits | None = None,
        array: ArrayEvents | None = None,
    ) -> None:
        self.upstream = upstream
        self.headers = headers
        self.call = call
        self.protocol = protocol
        self.hide_usage = hide_usage and protocol is not None and call is not None and array is None
        self.commits = commits
        self.parser: SSEParser | ArrayEvents = array if array is not None else SSEParser()
        self.client_gone = False
        self._ended = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, receive: Receive, send: Send, loop: asyncio.AbstractEventLoop) -> None:
        """Serve the answer; watch for the client going away meanwhile (a task on ``loop``)."""
        # (ASGI servers' receive() is a coroutine function)
        watch: asyncio.Task[Message] = loop.create_task(cast("Coroutine[Any, Any, Message]", receive()))
        watch.add_done_callback(self._on_message)
        self._loop = loop
        try:
            await self._pump(send)
        finally:
            watch.remove_done_callback(self._on_message)
            watch.cancel()
            self.upstream.close()
        if self.call is not None:
            self.call.format_captured()  # the answer is out (Call.format_after_answer)

    def _on_message(self, watch: asyncio.Future[Message]) -> None:
        if watch.cancelled() or watch.exception() is not None:
            return
        if watch.result()["type"] == "http.disconnect":
            self.client_gone = True
            self.upstream.abort(ReaderGone("the client went away"))

    async def _pump(self, send: Send) -> None:
        upstream, call = self.upstream, self.call
        await send({"type": "http.response.start", "status": upstream.status, "headers": self.headers})
        try:
            while chunk := await upstream.next_chunk():
                # When the upstream has said everything, this write also ends the answer:
                # one write, not two.
                last = upstream.done
                if call is None:  # passed through: every byte as it came
                    await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                    if last:
                        return
                    continue
                # The events are read before the bytes go out: the chunk that ends the
                # answer (its terminal event, or the body's end) is sent only once the call
                # is journaled.
                out, ended = self._read(self.parser.feed(chunk))
                if last:
                    tail, tail_ended = self._read(self.parser.close())
                    out, ended = out + tail, ended or tail_ended
                if not self.hide_usage:
                    out = chunk  # every byte as it came (an unfinished event is not held)
                if ended or last:
                    await self._ended_before_send()
                if out or last:
                    await send({"type": "http.response.body", "body": out, "more_body": not last})
                if last:
                    return
            if call is not None:
                out, _ = self._read(self.parser.close())
                if out and self.hide_usage:
                    await send({"type": "http.response.body", "body": out, "more_body": True})
        except UpstreamError as exc:
            if self.client_gone:
                self._finish(partial=True)
                return
            log.warning("upstream stream failed: %s", type(exc).__name__)
            self._finish(error=exc)
            return  # no terminator: the client sees the stream cut, as the upstream cut it
        except BaseException:
            self._finish(partial=True)  # shutting down
            raise
        await self._ended_before_send()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _ended_before_send(self) -> None:
        """The stream's end is about to go out: capture it once (journaled, and on a shared
        store stored: ``commits``) before the client can have it whole."""
        call = self.call
        if call is None or self._ended:
            return
        self._ended = True
        if self.commits is None or self._loop is None:
            self._finish(ended=True)
            return
        await self.commits.finish(call, lambda: self._finish(ended=True), self._loop)

    def _read(self, events: list[SSEEvent]) -> tuple[bytes, bool]:
        """Record ``events`` on the call; the bytes to forward (when hiding the usage
        event), and whether the stream's terminal event was among them."""
        call, protocol = self.call, self.protocol
        assert call is not None
        hide = self.hide_usage
        out = []
        ended = False
        for event in events:
            data = event.data
            if data is not None and data != "[DONE]":
                call.stream_item(data)
                if hide and '"usage"' in data:
                    assert protocol is not None
                    if protocol.is_hidden_usage_event(json_or_none(data)):
                        continue
            if _is_terminal(event):
                ended = True
            if hide:
                out.append(event.raw)
        return b"".join(out), ended

    def _finish(
        self, *, error: BaseException | None = None, partial: bool = False, ended: bool = False
    ) -> None:
        """Report the stream's end (the call keeps only the first report; once the terminal
        event went out, the stream counts as complete whatever follows)."""
        if self.call is None or (self._ended and not ended):
            return
        try:
            partial = partial or (self.client_gone and not ended)
            self.call.stream_finished(json_or_none, error=error, partial=partial)
        except Exception:
            log.exception("memtap could not capture a streamed answer")


#: Events after which a stream has said everything (OpenAI chat, Anthropic, Responses, a
#: JSON array's end).
TERMINAL_EVENTS = frozenset(
    {"message_stop", "response.completed", "response.incomplete", "response.failed", END_OF_ARRAY}
)


def _is_terminal(event: SSEEvent) -> bool:
    """Whether ``event`` ends its stream: clients stop reading there."""
    return event.data == "[DONE]" or event.event in TERMINAL_EVENTS
