"""Streams through the proxy against a raw upstream whose reads we control."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from proxy_support import make_memory

from memtap_proxy import Proxy, ProxyConfig, ProxyThread

UP = "http://upstream.test"


def chunk(content: str | None = None, finish: str | None = None, usage: bool = False) -> dict[str, Any]:
    delta = {"content": content} if content is not None else {}
    out: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        out["usage"] = None
    return out


USAGE = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "model": "m",
    "choices": [],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


class RawStream(httpx.AsyncByteStream):
    def __init__(
        self,
        pieces: list[bytes],
        *,
        fail: bool = False,
        gate: threading.Event | None = None,
        delay: float = 0,
    ) -> None:
        self.pieces = pieces
        self.fail = fail
        self.gate = gate
        self.delay = delay
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, piece in enumerate(self.pieces):
            if i == 1 and self.gate is not None:
                while not self.gate.is_set():
                    await asyncio.sleep(0.005)
            if i and self.delay:
                await asyncio.sleep(self.delay)
            yield piece
        if self.fail:
            raise httpx.ReadError("upstream connection reset")

    async def aclose(self) -> None:
        self.closed = True


class Upstream:
    """A scripted raw SSE upstream: records request bodies, answers with given pieces."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.next: Callable[[], RawStream] = lambda: RawStream([])
        self.streams: list[RawStream] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        stream = self.next()
        self.streams.append(stream)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


@pytest.fixture
def raw():
    upstream = Upstream()
    memory = make_memory()
    proxy = Proxy(ProxyConfig(openai_upstream=UP), memory, transport=httpx.MockTransport(upstream.handler))
    with ProxyThread(proxy) as thread:
        yield upstream, thread, memory
    memory.close()


def post(thread: ProxyThread, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(thread.url + "/v1/chat/completions", json=body, timeout=10)


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def events_bytes(*objs: Any, eol: bytes = b"\n") -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + eol + eol for o in objs)


def test_odd_reads_crlf_no_space_and_eof_without_done_are_forwarded_and_captured(raw) -> None:
    upstream, thread, memory = raw
    stream = (
        b"data:"
        + json.dumps(chunk("Hel", usage=True)).encode()
        + b"\r\n\r\n"
        + events_bytes(chunk("lo", usage=True), eol=b"\r\n")
        + events_bytes(chunk(None, "stop", usage=True), USAGE)
        + b": comment\n\n"
    )
    cuts = [0, 3, 17, 60, 61, len(stream) - 5, len(stream)]
    upstream.next = lambda: RawStream([stream[a:b] for a, b in itertools.pairwise(cuts)])
    r = post(thread, BODY)
    usage_event = events_bytes(USAGE)
    assert r.content == stream.replace(usage_event, b"")  # exactly the usage event's bytes dropped
    assert json.loads(upstream.bodies[-1])["stream_options"] == {"include_usage": True}
    memory.flush()
    (exchange,) = list(memory.store.exchanges())
    assert exchange.status == "ok"
    assert [m.content for m in memory.history("default")] == ["hi", "Hello"]
    assert exchange.usage.output_tokens == 2


def test_done_split_across_reads_and_client_usage_kept(raw) -> None:
    upstream, thread, _ = raw
    stream = events_bytes(chunk("a"), chunk(None, "stop"), USAGE) + b"data: [DO"
    upstream.next = lambda: RawStream([stream, b"NE]\n", b"\n"])
    body = {**BODY, "stream_options": {"include_usage": True}}
    r = post(thread, body)
    assert r.content == stream + b"NE]\n\n"
    assert json.loads(upstream.bodies[-1]) == body


def test_upstream_failure_mid_stream_is_captured_as_error(raw) -> None:
    upstream, thread, memory = raw
    upstream.next = lambda: RawStream([events_bytes(chunk("partial answer"))], fail=True)
    with pytest.raises(httpx.HTTPError):
        post(thread, BODY)
    memory.flush()
    (exchange,) = list(memory.store.exchanges())
    assert exchange.status == "error"


def test_first_chunk_is_not_held_back(raw) -> None:
    upstream, thread, _ = raw
    gate = threading.Event()
    upstream.next = lambda: RawStream(
        [events_bytes(chunk("first")), events_bytes(chunk("second"))], gate=gate
    )
    with httpx.stream("POST", thread.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        reads = r.iter_raw()
        first = next(reads)
        assert b"first" in first  # arrived while the upstream still holds the rest
        gate.set()
        rest = b"".join(reads)
    assert b"second" in rest


def test_client_disconnect_is_captured_as_partial(raw) -> None:
    upstream, thread, memory = raw
    pieces = [events_bytes(chunk(f"w{i} ")) for i in range(200)]
    upstream.next = lambda: RawStream(pieces, delay=0.01)
    with httpx.stream("POST", thread.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        next(r.iter_raw())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        memory.flush()
        exchanges = list(memory.store.exchanges())
        if exchanges:
            break
        time.sleep(0.05)
    (exchange,) = exchanges
    assert exchange.status == "partial"
    assert upstream.streams[-1].closed
