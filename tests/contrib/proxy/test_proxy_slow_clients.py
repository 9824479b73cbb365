"""Slow, stalled and idle clients cannot hold the proxy (issue #14 item 6).

Real sockets on loopback: a client that sends its head and stalls, one that trickles its
head a header at a time (slowloris), one that never sends a byte, one whose head never
ends, and many of them at once. Each is bounded in time (the proxy runs with sub-second
timeouts here) and in count (``max_clients``), while ordinary clients, slow upstream
answers and long streams go on unharmed.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest
from proxy_support import API_KEY

import memtap
from memtap.testing.server import Reply, ScriptedModelServer
from memtap.testing.timing import wait_for
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

TIMEOUT = 0.5  # header, body and idle timeouts of the proxy under test
SLACK = 2.0  # how late past its timeout a connection may be closed on a busy 2-core machine
CHAT = "/v1/chat/completions"
BODY = b'{"model":"m","messages":[{"role":"user","content":"slow hello"}]}'


def head(length: int = len(BODY), path: str = CHAT) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode()


@pytest.fixture
def make_proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[Callable[..., ProxyThread]]:
    threads: list[ProxyThread] = []

    def make(**limits: object) -> ProxyThread:
        settings: dict[str, object] = {
            "header_timeout": TIMEOUT,
            "body_timeout": TIMEOUT,
            "idle_timeout": TIMEOUT,
            **limits,
        }
        config = ProxyConfig(
            openai_upstream=upstream.base_url,
            session_id="default",  # one running session, read back by the tests
            **settings,  # type: ignore[arg-type]
        )
        thread = ProxyThread(Proxy(config, mem)).start()
        threads.append(thread)
        return thread

    yield make
    for thread in threads:
        thread.stop()


@pytest.fixture
def slow_proxy(make_proxy: Callable[..., ProxyThread]) -> ProxyThread:
    return make_proxy()


def connect(proxy: ProxyThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def until_closed(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """Everything the proxy sends until it closes the connection, and when it closed
    (seconds from now); fails if it is still open after ``limit`` seconds."""
    start = time.monotonic()
    sock.settimeout(limit)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the proxy still holds the connection after {limit} s (got {data[:80]!r})")
    except ConnectionResetError:
        pass
    return data, time.monotonic() - start


def open_connections(proxy: ProxyThread) -> int:
    return len(proxy.server.server_state.connections)


# -- one slow client at a time ---------------------------------------------------------------


def test_a_stalled_body_gets_408_and_is_closed(slow_proxy, upstream, mem) -> None:
    sock = connect(slow_proxy)
    sock.sendall(head() + BODY[:10])  # the rest never comes
    data, took = until_closed(sock, TIMEOUT + SLACK)
    assert data.startswith(b"HTTP/1.1 408 ") and b"--body-timeout" in data
    assert took >= TIMEOUT * 0.8
    assert upstream.requests == []
    mem.flush()
    assert mem.history("default") == []


def test_a_body_trickled_a_byte_at_a_time_is_bounded_as_a_whole(slow_proxy, upstream) -> None:
    sock = connect(slow_proxy)
    sock.sendall(head())
    start = time.monotonic()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        for byte in BODY:
            sock.sendall(bytes([byte]))
            time.sleep(0.1)  # each byte well within any per-read timeout
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert upstream.requests == []


def test_slowloris_head_is_cut_off(slow_proxy) -> None:
    sock = connect(slow_proxy)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    start = time.monotonic()
    try:
        for i in range(100):
            sock.sendall(f"x-slow-{i}: {i}\r\n".encode())  # a header every 0.1 s, never the end
            time.sleep(0.1)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data, _ = until_closed(sock, SLACK)
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert data.startswith(b"HTTP/1.1 408 ") and b"--header-timeout" in data


def test_a_connection_that_never_sends_is_closed(slow_proxy) -> None:
    data, took = until_closed(connect(slow_proxy), TIMEOUT + SLACK)
    assert data == b"" and took >= TIMEOUT * 0.8


def test_blank_lines_do_not_keep_a_connection_open(slow_proxy) -> None:
    sock = connect(slow_proxy)
    start = time.monotonic()
    try:
        for _ in range(100):
            sock.sendall(b"\r\n")  # skipped by the parser: no request ever begins
            time.sleep(0.1)
    except (BrokenPipeError, ConnectionResetError):
        pass
    until_closed(sock, SLACK)
    assert time.monotonic() - start < TIMEOUT + SLACK


def test_a_head_larger_than_64_kib_gets_431(slow_proxy, upstream) -> None:
    sock = connect(slow_proxy)
    try:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(100):
            sock.sendall(f"x-big-{i}: {'a' * 1000}\r\n".encode())
    except (BrokenPipeError, ConnectionResetError):
        pass
    data, _ = until_closed(sock, SLACK)
    assert data.startswith(b"HTTP/1.1 431 ")
    assert upstream.requests == []


def test_a_keep_alive_connection_is_closed_when_idle(slow_proxy) -> None:
    sock = connect(slow_proxy)
    sock.sendall(head() + BODY)
    first = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ")
    time.sleep(TIMEOUT / 3)  # reused before it idles out: served
    sock.sendall(head() + BODY)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    data, took = until_closed(sock, TIMEOUT + SLACK)
    assert data == b"" and took >= TIMEOUT * 0.8


# -- what must not be cut --------------------------------------------------------------------


def test_slow_upstream_answers_and_long_streams_are_not_cut(slow_proxy, upstream, mem) -> None:
    oai = openai.OpenAI(base_url=slow_proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    upstream.script(Reply(text="took a while", delay=3 * TIMEOUT))
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    assert r.choices[0].message.content == "took a while"
    upstream.script(Reply(text="one two three four", delay=3 * TIMEOUT, chunks=4))
    chunks = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two three four"
    wait_for(lambda: len(mem.history("default")) == 4)  # captured once the answer is out


def test_a_body_sent_in_pieces_within_the_timeout_is_served(slow_proxy, upstream) -> None:
    sock = connect(slow_proxy)
    sock.sendall(head())
    for piece in (BODY[:20], BODY[20:40], BODY[40:]):
        time.sleep(TIMEOUT / 5)
        sock.sendall(piece)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    assert upstream.requests[-1].body == BODY


def test_a_refused_request_does_not_wait_for_its_body(make_proxy, upstream) -> None:
    proxy = make_proxy(max_body=10)
    sock = connect(proxy)
    sock.sendall(head(length=1000) + b"{")
    data, took = until_closed(sock, TIMEOUT + SLACK)
    assert data.startswith(b"HTTP/1.1 413 ") and took < TIMEOUT + SLACK
    assert upstream.requests == []


# -- many at once -----------------------------------------------------------------------------


def test_many_stalled_bodies_are_all_released(make_proxy, upstream) -> None:
    proxy = make_proxy(max_clients=500)
    socks = [connect(proxy) for _ in range(200)]
    for sock in socks:
        sock.sendall(head() + BODY[:5])
    wait_for(lambda: open_connections(proxy) == 200)
    deadline = time.monotonic() + TIMEOUT + 3 * SLACK
    closed = 0
    for sock in socks:
        data, _ = until_closed(sock, max(0.1, deadline - time.monotonic()))
        closed += data.startswith(b"HTTP/1.1 408 ")
        sock.close()
    assert closed == 200
    wait_for(lambda: open_connections(proxy) == 0)
    assert upstream.requests == []


def test_idle_connections_make_room_for_real_clients(make_proxy, upstream) -> None:
    proxy = make_proxy(max_clients=20, idle_timeout=30, header_timeout=30)
    idle = [connect(proxy) for _ in range(40)]  # twice the bound, silent
    idle[0].sendall(b"POST /v1/chat")  # and one stuck in its head
    wait_for(lambda: open_connections(proxy) <= 20)
    oai = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    for i in range(5):
        r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
        assert r.choices[0].message.content == f"You said: q{i}"
    assert open_connections(proxy) <= 20
    for sock in idle:
        sock.close()


def test_over_the_bound_with_every_connection_busy_gets_503(make_proxy, upstream) -> None:
    proxy = make_proxy(max_clients=10, body_timeout=30)
    busy = [connect(proxy) for _ in range(10)]
    for sock in busy:
        sock.sendall(head() + BODY[:5])  # requests under way (their bodies still coming)
    wait_for(lambda: open_connections(proxy) == 10)
    r = httpx.post(proxy.url + CHAT, content=BODY)
    assert r.status_code == 503 and "--max-clients" in r.text
    for sock in busy:  # the bodies arrive: every one is served
        sock.sendall(BODY[5:])
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        sock.close()
    assert len(upstream.requests) == 10
    r = httpx.post(proxy.url + CHAT, content=BODY)
    assert r.status_code == 200
