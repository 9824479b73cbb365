"""The proxy's own upstream client (memtap_proxy.upstream) against a raw HTTP/1.1 server
on 127.0.0.1: keep-alive reuse, body framings, streaming without buffering, hang-ups,
timeouts, the connection cap, TLS."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from proxy_raw_upstream import CLOSE, END, RawUpstream, Seen, chunk, head, json_answer, tls_contexts

from memtap_proxy.upstream import (
    UpstreamConnectError,
    UpstreamPool,
    UpstreamProtocolError,
    UpstreamReadError,
    UpstreamResponse,
    UpstreamTimeout,
)

T = TypeVar("T")
JSON = [(b"content-type", b"application/json")]


def run(make: Callable[[UpstreamPool], Awaitable[T]], **pool_options: Any) -> T:
    async def main() -> T:
        pool = UpstreamPool(**pool_options)
        try:
            return await make(pool)
        finally:
            await pool.aclose()

    return asyncio.run(main())


async def fetch(pool: UpstreamPool, url: str, body: bytes = b"{}", method: str = "POST") -> tuple[int, bytes]:
    response = await pool.request(method, url, JSON, body)
    try:
        return response.status, await response.read()
    finally:
        response.close()


# Own server: a raw upstream (exact bytes and connections), not the scripted model.
@pytest.fixture
def server():
    with RawUpstream() as server:
        yield server


def test_keep_alive_connection_is_reused_and_the_request_is_sent_as_given(server) -> None:
    async def go(pool: UpstreamPool) -> list[tuple[int, bytes]]:
        return [await fetch(pool, server.url + f"/v1/x?n={i}", b'{"i": %d}' % i) for i in range(3)]

    answers = run(go)
    assert answers == [(200, b'{"ok": true}')] * 3
    assert server.connections == 1 and server.pipelined == 0
    seen = server.requests[2]
    assert seen.method == "POST" and seen.target == "/v1/x?n=2" and seen.body == b'{"i": 2}'
    # Exactly the given headers, plus the Host and Content-Length the client sets itself.
    assert seen.headers == {
        "host": f"127.0.0.1:{server.port}",
        "content-type": "application/json",
        "content-length": "8",
    }


def test_chunked_body_is_read_as_it_arrives(server) -> None:
    gate = threading.Event()
    server.script = lambda seen: [
        head(200, [("transfer-encoding", "chunked")]),
        chunk(b"first"),
        gate,
        chunk(b"sec"),
        chunk(b"ond"),
        END,
    ]

    async def go(pool: UpstreamPool) -> list[bytes]:
        response = await pool.request("POST", server.url + "/s", JSON, b"{}")
        pieces = [await response.next_chunk()]  # comes while the upstream holds the rest
        gate.set()
        while piece := await response.next_chunk():
            pieces.append(piece)
        response.close()
        return pieces

    pieces = run(go)
    assert pieces[0] == b"first" and b"".join(pieces) == b"firstsecond"


def test_body_until_close_head_no_content_and_informational_answers(server) -> None:
    def script(seen: Seen) -> list[Any]:
        if seen.target == "/until-close":
            return [head(200, [("content-type", "text/plain")]), b"all of ", 0.01, b"it", CLOSE]
        if seen.method == "HEAD":
            return [head(200, [("content-length", "1234")])]
        if seen.target == "/empty":
            return [head(204)]
        return [head(100, reason="Continue"), *json_answer({"after": "continue"})]

    server.script = script

    async def go(pool: UpstreamPool) -> list[tuple[int, bytes]]:
        return [
            await fetch(pool, server.url + "/until-close"),
            await fetch(pool, server.url + "/head", b"", method="HEAD"),
            await fetch(pool, server.url + "/empty", b"", method="GET"),
            await fetch(pool, server.url + "/empty", b"", method="GET"),
            await fetch(pool, server.url + "/continue"),
        ]

    assert run(go) == [
        (200, b"all of it"),
        (200, b""),
        (204, b""),
        (204, b""),
        (200, b'{"after": "continue"}'),
    ]
    # until-close and HEAD answers leave their connection unusable; 204s keep theirs.
    assert server.connections == 3
    assert "content-length" not in server.requests[2].headers  # a GET without a body


def test_upstream_hanging_up_mid_body_is_an_error_and_the_connection_is_dropped(server) -> None:
    server.script = lambda seen: (
        [head(200, [("content-length", "100")]), b"only part", CLOSE]
        if seen.target == "/cut"
        else json_answer({"ok": True})
    )

    async def go(pool: UpstreamPool) -> tuple[int, bytes]:
        response = await pool.request("POST", server.url + "/cut", JSON, b"{}")
        assert await response.next_chunk() == b"only part"
        with pytest.raises(UpstreamReadError):
            await response.next_chunk()
        response.close()
        return await fetch(pool, server.url + "/next")

    assert run(go) == (200, b'{"ok": true}')
    assert server.connections == 2


def test_idle_connection_closed_by_the_upstream_is_replaced_transparently(server) -> None:
    # The upstream drops its idle connection just as the second request arrives on it (the
    # race every keep-alive client meets): the request is sent again on a new connection.
    server.script = lambda seen: (
        [CLOSE] if seen.connection == 1 and seen.target == "/second" else json_answer({"ok": seen.target})
    )

    async def go(pool: UpstreamPool) -> list[tuple[int, bytes]]:
        return [await fetch(pool, server.url + "/first"), await fetch(pool, server.url + "/second")]

    assert run(go) == [(200, b'{"ok": "/first"}'), (200, b'{"ok": "/second"}')]
    assert [(s.target, s.connection) for s in server.requests] == [
        ("/first", 1),
        ("/second", 1),
        ("/second", 2),
    ]


def test_a_new_connection_closed_without_an_answer_is_not_retried(server) -> None:
    server.script = lambda seen: [CLOSE]
    with pytest.raises(UpstreamReadError):
        run(lambda pool: fetch(pool, server.url + "/x"))
    assert len(server.requests) == 1


def test_connect_failure_read_timeout_and_garbage(server) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # nothing listens here once the socket closes
    with pytest.raises(UpstreamConnectError):
        run(lambda pool: fetch(pool, f"http://127.0.0.1:{closed_port}/x"))

    server.script = lambda seen: [1.0, *json_answer({})]
    with pytest.raises(UpstreamTimeout):
        run(lambda pool: fetch(pool, server.url + "/slow"), read_timeout=0.2)

    server.script = lambda seen: [b"SMTP ready\r\n\r\n"]
    with pytest.raises(UpstreamProtocolError):
        run(lambda pool: fetch(pool, server.url + "/garbage"))


def test_connection_cap_makes_requests_wait_their_turn(server) -> None:
    server.script = lambda seen: [0.05, *json_answer({"ok": seen.target})]

    async def go(pool: UpstreamPool) -> list[tuple[int, bytes]]:
        return list(await asyncio.gather(*(fetch(pool, server.url + f"/{i}") for i in range(3))))

    answers = run(go, max_connections=1)
    assert answers == [(200, b'{"ok": "/%d"}' % i) for i in range(3)]
    assert server.connections == 1  # one at a time, each reusing the same connection


def test_idle_connections_expire(server) -> None:
    async def go(pool: UpstreamPool) -> None:
        await fetch(pool, server.url + "/a")
        await fetch(pool, server.url + "/b")

    run(go, keepalive_expiry=0.0)
    assert server.connections == 2


def test_large_bodies_both_ways(server) -> None:
    sent = bytes(range(256)) * 1000  # 256 kB, written beside the head
    answer = b"z" * (3 * 1024 * 1024)  # more than the read-ahead limit: reading pauses
    server.script = lambda seen: [head(200, [("content-length", str(len(answer)))]), answer]

    async def go(pool: UpstreamPool) -> bytes:
        response = await pool.request("POST", server.url + "/big", JSON, sent)
        got = bytearray()
        while piece := await response.next_chunk():
            got += piece
            await asyncio.sleep(0.001)  # a slow reader
        response.close()
        return bytes(got)

    assert run(go) == answer
    assert server.requests[0].body == sent


def test_an_abandoned_answer_closes_its_connection(server) -> None:
    gate = threading.Event()
    server.script = lambda seen: (
        [head(200, [("transfer-encoding", "chunked")]), chunk(b"a"), gate, chunk(b"b"), END]
        if seen.target == "/stream"
        else json_answer({})
    )

    async def go(pool: UpstreamPool) -> UpstreamResponse:
        response = await pool.request("POST", server.url + "/stream", JSON, b"{}")
        assert await response.next_chunk() == b"a"
        response.close()  # not read to the end
        await fetch(pool, server.url + "/next")
        return response

    run(go)
    gate.set()
    assert server.connections == 2


def test_https_upstream_is_verified() -> None:
    server_context, client_context = tls_contexts("127.0.0.1")
    with RawUpstream(tls=server_context) as server:
        assert server.url.startswith("https://")

        async def go(pool: UpstreamPool) -> list[tuple[int, bytes]]:
            return [await fetch(pool, server.url + "/tls"), await fetch(pool, server.url + "/tls")]

        assert run(go, ssl_context=client_context) == [(200, b'{"ok": true}')] * 2
        assert server.connections == 1
        with pytest.raises(UpstreamConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            run(lambda pool: fetch(pool, server.url + "/untrusted"))
