"""HTTP forwarding through the proxy against a raw upstream: keep-alive, framings, headers,
hang-ups, paths; and the server side's one-write-per-step transport."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
import pytest
from proxy_raw_upstream import CLOSE, END, RawUpstream, Seen, chunk, head, json_answer
from proxy_support import make_memory

from memtap_proxy import Proxy, ProxyConfig, ProxyThread
from memtap_proxy.coalesce import HeadHoldingTransport

ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
BODY = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}


@pytest.fixture
def raw():
    memory = make_memory()
    upstream = RawUpstream(script=lambda seen: json_answer(ANSWER))
    with (
        upstream,
        ProxyThread(Proxy(ProxyConfig(openai_upstream=upstream.url, session_id="default"), memory)) as thread,
    ):
        yield upstream, thread, memory
    memory.close()


def chat(client: httpx.Client, thread: ProxyThread, **kwargs: Any) -> httpx.Response:
    return client.post(thread.url + "/v1/chat/completions", json=BODY, **kwargs)


def test_calls_share_one_upstream_connection_and_headers_pass_as_sent(raw) -> None:
    upstream, thread, memory = raw
    with httpx.Client(timeout=10) as client:
        for _ in range(3):
            r = chat(client, thread, headers={"authorization": "Bearer k", "x-memtap-entity": "e"})
            assert r.status_code == 200 and r.json() == ANSWER
    assert upstream.connections == 1 and len(upstream.requests) == 3
    headers = upstream.requests[0].headers
    # The client's own headers (httpx's defaults included), none added by the proxy but
    # Host, Content-Length and the identity encoding it reads answers in.
    assert headers.pop("host") == f"127.0.0.1:{upstream.port}"
    assert headers.pop("accept-encoding") == "identity"
    assert int(headers.pop("content-length")) == len(upstream.requests[0].body)
    assert headers == {
        "accept": "*/*",
        "user-agent": f"python-httpx/{httpx.__version__}",
        "content-type": "application/json",
        "authorization": "Bearer k",
    }
    memory.flush()
    assert [m.content for m in memory.history("default", entity_id="e")][-2:] == ["ping", "pong"]


def test_chunked_json_answer_is_sent_with_a_length_and_captured(raw) -> None:
    upstream, thread, memory = raw
    data = json.dumps(ANSWER).encode()
    upstream.script = lambda seen: [
        head(200, [("content-type", "application/json"), ("transfer-encoding", "chunked")]),
        chunk(data[:10]),
        0.005,
        chunk(data[10:]),
        END,
    ]
    with httpx.Client(timeout=10) as client:
        r = chat(client, thread)
    assert r.content == data and r.headers["content-length"] == str(len(data))
    assert "transfer-encoding" not in r.headers
    memory.flush()
    assert [m.content for m in memory.history("default")] == ["ping", "pong"]


def test_upstream_closing_after_each_answer(raw) -> None:
    upstream, thread, _ = raw
    data = json.dumps(ANSWER).encode()
    close_after = head(200, [("content-length", str(len(data))), ("connection", "close")]) + data
    upstream.script = lambda seen: [close_after, CLOSE]
    with httpx.Client(timeout=10) as client:
        assert [chat(client, thread).json() for _ in range(3)] == [ANSWER] * 3
    assert upstream.connections == 3


def test_answer_cut_mid_body_is_a_502_and_nothing_is_stored(raw) -> None:
    upstream, thread, memory = raw
    upstream.script = lambda seen: [head(200, [("content-length", "500")]), b'{"partial":', CLOSE]
    with httpx.Client(timeout=10) as client:
        r = chat(client, thread)
        assert r.status_code == 502 and "answer cut" in r.json()["error"]["message"]
        upstream.script = lambda seen: json_answer(ANSWER)
        assert chat(client, thread).json() == ANSWER  # the next call gets a fresh connection
    memory.flush()
    assert len(memory.history("default")) == 2


def test_passed_through_paths_methods_and_statuses(raw) -> None:
    upstream, thread, _ = raw

    def script(seen: Seen) -> list[Any]:
        if seen.method == "HEAD":
            return [head(200, [("content-length", "42"), ("x-upstream", "1")])]
        if seen.target.startswith("/v1/files"):
            return [head(404, [("content-length", "9")]) + b"not found"]
        return json_answer({"method": seen.method})

    upstream.script = script
    with httpx.Client(timeout=10) as client:
        r = client.get(thread.url + "/v1/files/a%2Fb?x=%20y")
        assert r.status_code == 404 and r.content == b"not found"
        assert upstream.requests[-1].target == "/v1/files/a%2Fb?x=%20y"  # the raw path, as sent
        r = client.head(thread.url + "/v1/models")
        assert r.status_code == 200 and r.headers["content-length"] == "42" and r.content == b""
        assert client.delete(thread.url + "/v1/models/x").json() == {"method": "DELETE"}
        assert client.get(thread.url + "/codex/v1/models").json() == {"method": "GET"}
        assert upstream.requests[-1].target == "/v1/models"  # the agent prefix is removed
    assert upstream.connections == 2  # the HEAD answer's connection is not reused


def test_client_disconnect_before_the_answer_leaves_the_proxy_serving(raw) -> None:
    upstream, thread, _ = raw
    upstream.script = lambda seen: [0.2, *json_answer(ANSWER)]
    with socket.create_connection(("127.0.0.1", thread.port)) as s:
        body = json.dumps(BODY).encode()
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body)
        )
    upstream.script = lambda seen: json_answer(ANSWER)
    with httpx.Client(timeout=10) as client:
        assert chat(client, thread).json() == ANSWER


def test_a_response_head_leaves_with_the_first_body_bytes() -> None:
    async def main() -> tuple[list[bytes], bytes]:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=left)
        writes: list[bytes] = []
        real_write = transport.write

        def recording_write(data: bytes) -> None:
            writes.append(bytes(data))
            real_write(data)

        transport.write = recording_write  # type: ignore[method-assign]
        holding = HeadHoldingTransport(transport, loop)  # type: ignore[arg-type]
        holding.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
        assert writes == []  # the head waits for its body
        holding.write(b"body")
        holding.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        await asyncio.sleep(0)  # no body in this step: the head leaves at its end
        holding.write(b"5\r\nfirst\r\n")
        holding.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        holding.close()  # a held head leaves before the close
        right.setblocking(False)
        received = b""
        for _ in range(100):
            try:
                data = right.recv(1000)
            except BlockingIOError:
                await asyncio.sleep(0.01)
                continue
            if not data:
                break
            received += data
        right.close()
        return writes, received

    writes, received = asyncio.run(main())
    assert writes == [
        b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
        b"5\r\nfirst\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ]
    assert received == b"".join(writes)
