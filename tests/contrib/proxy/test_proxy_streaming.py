"""Streams through the proxy against a raw upstream whose bytes and pauses we script."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import httpx
import pytest
from proxy_raw_upstream import CLOSE, SSE_HEAD, RawUpstream, chunk, json_answer, sse_answer
from proxy_support import make_memory

from memtap_proxy import Proxy, ProxyConfig, ProxyThread


def chunk_event(content: str | None = None, finish: str | None = None, usage: bool = False) -> dict[str, Any]:
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


@pytest.fixture
def raw():
    memory = make_memory()
    with RawUpstream() as upstream:
        proxy = Proxy(ProxyConfig(openai_upstream=upstream.url, session_id="default"), memory)
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
        + json.dumps(chunk_event("Hel", usage=True)).encode()
        + b"\r\n\r\n"
        + events_bytes(chunk_event("lo", usage=True), eol=b"\r\n")
        + events_bytes(chunk_event(None, "stop", usage=True), USAGE)
        + b": comment\n\n"
    )
    cuts = [0, 3, 17, 60, 61, len(stream) - 5, len(stream)]
    upstream.script = lambda seen: sse_answer([stream[a:b] for a, b in itertools.pairwise(cuts)], pause=0.003)
    r = post(thread, BODY)
    usage_event = events_bytes(USAGE)
    assert r.content == stream.replace(usage_event, b"")  # exactly the usage event's bytes dropped
    assert upstream.requests[-1].json["stream_options"] == {"include_usage": True}
    memory.flush()
    (exchange,) = list(memory.store.exchanges())
    assert exchange.status == "ok"
    assert [m.content for m in memory.history("default")] == ["hi", "Hello"]
    assert exchange.usage.output_tokens == 2


def test_done_split_across_reads_and_client_usage_kept(raw) -> None:
    upstream, thread, _ = raw
    stream = events_bytes(chunk_event("a"), chunk_event(None, "stop"), USAGE) + b"data: [DO"
    upstream.script = lambda seen: sse_answer([stream, b"NE]\n", b"\n"], pause=0.003)
    body = {**BODY, "stream_options": {"include_usage": True}}
    r = post(thread, body)
    assert r.content == stream + b"NE]\n\n"
    assert upstream.requests[-1].json == body


def test_upstream_failure_mid_stream_is_captured_as_error(raw) -> None:
    upstream, thread, memory = raw
    # The upstream hangs up in the middle of its chunked answer.
    upstream.script = lambda seen: [SSE_HEAD, chunk(events_bytes(chunk_event("partial answer"))), 0.01, CLOSE]
    with httpx.stream("POST", thread.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        got = b""
        with pytest.raises(httpx.HTTPError):
            for piece in r.iter_raw():
                got += piece
    assert b"partial answer" in got  # what came before the failure was forwarded
    memory.flush()
    (exchange,) = list(memory.store.exchanges())
    assert exchange.status == "error"


def test_first_chunk_is_not_held_back(raw) -> None:
    upstream, thread, _ = raw
    gate = threading.Event()
    upstream.script = lambda seen: sse_answer(
        [events_bytes(chunk_event("first")), events_bytes(chunk_event("second"))], gate=gate
    )
    with httpx.stream("POST", thread.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        reads = r.iter_raw()
        first = next(reads)
        assert b"first" in first  # arrived while the upstream still holds the rest
        gate.set()
        rest = b"".join(reads)
    assert b"second" in rest


def test_passed_through_stream_is_not_held_back(raw) -> None:
    upstream, thread, _ = raw
    gate = threading.Event()
    upstream.script = lambda seen: sse_answer([b"data: one\n\n", b"data: two\n\n"], gate=gate)
    with httpx.stream("POST", thread.url + "/v1/other/stream", json={}, timeout=10) as r:
        reads = r.iter_raw()
        assert b"one" in next(reads)
        gate.set()
        assert b"two" in b"".join(reads)


def _exchanges(memory, deadline: float = 5.0) -> list:
    end = time.monotonic() + deadline
    while True:
        memory.flush()
        exchanges = list(memory.store.exchanges())
        if exchanges or time.monotonic() > end:
            return exchanges
        time.sleep(0.05)


def test_client_disconnect_is_captured_as_partial(raw) -> None:
    upstream, thread, memory = raw
    pieces = [events_bytes(chunk_event(f"w{i} ")) for i in range(200)]
    upstream.script = lambda seen: sse_answer(pieces, pause=0.01)
    with httpx.stream("POST", thread.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        next(r.iter_raw())
    (exchange,) = _exchanges(memory)
    assert exchange.status == "partial"
    deadline = time.monotonic() + 5
    while not upstream.peer_closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.peer_closed == 1  # the proxy hung up on the upstream, which stopped sending


def test_client_disconnect_while_the_upstream_is_silent(raw) -> None:
    upstream, thread, memory = raw
    gate = threading.Event()  # never set: the upstream thinks for ever after its first event
    upstream.script = lambda seen: sse_answer([events_bytes(chunk_event("thinking")), b"never"], gate=gate)
    with httpx.stream("POST", thread.url + "/v1/chat/completions", json=BODY, timeout=10) as r:
        next(r.iter_raw())
    (exchange,) = _exchanges(memory)
    assert exchange.status == "partial"
    deadline = time.monotonic() + 5
    while not upstream.peer_closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.peer_closed == 1


def test_streams_reuse_the_upstream_connection(raw) -> None:
    upstream, thread, _ = raw
    upstream.script = lambda seen: sse_answer(
        [events_bytes(chunk_event("ok"), chunk_event(None, "stop")), b"data: [DONE]\n\n"]
    )
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            r = client.post(thread.url + "/v1/chat/completions", json=BODY)
            assert r.content.endswith(b"data: [DONE]\n\n")
    assert len(upstream.requests) == 3 and upstream.connections == 1
    assert upstream.pipelined == 0


@pytest.mark.parametrize("done", [True, False], ids=["done-event", "eof-without-done"])
def test_a_client_that_read_the_whole_answer_and_flushes_finds_it_stored(raw, monkeypatch, done) -> None:
    """A slow capture of the stream's end (a busy event loop) must not let a client that has
    read the whole answer, then flushes, find nothing stored."""
    from memtap_proxy import relay

    original = relay.StreamRelay._finish

    def slow_loop(self: relay.StreamRelay, **kwargs: Any) -> None:
        time.sleep(0.3)  # the loop is busy elsewhere around the last bytes
        original(self, **kwargs)

    monkeypatch.setattr(relay.StreamRelay, "_finish", slow_loop)
    upstream, thread, memory = raw
    stream = events_bytes(chunk_event("Hel", usage=True), chunk_event(None, "stop", usage=True), USAGE)
    if done:
        stream += b"data: [DONE]\n\n"
    upstream.script = lambda seen: sse_answer([stream], pause=0.003)
    r = post(thread, BODY)
    assert r.status_code == 200
    assert memory.flush(10)
    (exchange,) = list(memory.store.exchanges())
    assert exchange.status == "ok" and [m.content for m in exchange.output] == ["Hel"]


def test_a_client_that_read_a_whole_json_answer_and_flushes_finds_it_stored(raw, monkeypatch) -> None:
    """The same for an answer that is not streamed."""
    from memtap_proxy import app

    original = app._capture_whole

    def slow_loop(*args: Any) -> None:
        time.sleep(0.3)
        original(*args)

    monkeypatch.setattr(app, "_capture_whole", slow_loop)
    upstream, thread, memory = raw
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    upstream.script = lambda seen: json_answer(answer)
    r = post(thread, {**BODY, "stream": False})
    assert r.status_code == 200
    assert memory.flush(10)
    (exchange,) = list(memory.store.exchanges())
    assert [m.content for m in exchange.output] == ["Hello"]
