"""Read-your-writes per session across proxy processes on one PostgreSQL (issue 35, item 3).

8 clients, each a session that sends only its new turn, each follow-up sent on a new
connection the moment the previous answer is read: served by ``memtap proxy --workers 2``,
and by two separate proxy processes behind a round-robin TCP relay written here (two
hosts behind a load balancer, on 127.0.0.1). Every follow-up must reach the model with
every earlier turn of its session, whichever process served them. A DuckDB file is one
process's (``--workers`` refuses it): there a session is always served by the process that
wrote it, which the in-process tests cover.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_proxy_workers import START, WorkersProcess, free_port

from memtap.testing.server import ScriptedModelServer

CLIENTS = 8
TURNS = 25  # 8 x 24 = 192 follow-ups
#: Earlier turns each follow-up must carry: its latest ones (the default history budget,
#: 20 messages, holds 10 turns; older ones are left out by design).
RECENT = 5
#: The proxies' warnings (a store late to answer), shown when a follow-up missed a turn.
LATE: list[str] = []


class RoundRobin:
    """A TCP relay on 127.0.0.1 handing each new connection to the next backend in turn;
    :attr:`backend_of` maps a client's port to the backend index it was given."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.backend_of: dict[int, int] = {}
        self._next = 0
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, (_, client_port) = self.listener.accept()
            except OSError:
                return
            index = self._next % len(self.backends)
            self._next += 1
            self.backend_of[client_port] = index
            upstream = socket.create_connection(("127.0.0.1", self.backends[index]))
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self.listener.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class SingleProxy:
    """``memtap proxy`` (one process) in a subprocess."""

    def __init__(self, home: Path, upstream: ScriptedModelServer, store: str) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
        env["MEMTAP_HOME"] = str(home)
        self.log = (home.parent / f"proxy-{self.port}.log").open("w+")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-c", START, "proxy", "--port", str(self.port), "--store", store),
                *("--openai-upstream", upstream.base_url, "--log-level", "info"),
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while "Application startup complete" not in self.output():
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "the proxy did not start:\n" + self.output()
            time.sleep(0.1)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def turn(port: int, client: int, number: int) -> int:
    """Send one turn on a new connection; the client port it used (after reading the answer)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": f"c{client} turn {number}"}]}
        )
        headers = {
            "content-type": "application/json",
            "x-memtap-entity": "team",
            "x-memtap-session": f"rw{client}",
        }
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        assert conn.sock is not None
        local = int(conn.sock.getsockname()[1])
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
        return local
    finally:
        conn.close()


def run_clients(port: int) -> dict[int, list[int]]:
    """Every client's turns, back to back; the client ports each used, per client."""

    def client(n: int) -> list[int]:
        return [turn(port, n, i) for i in range(TURNS)]

    with ThreadPoolExecutor(CLIENTS) as pool:
        return dict(enumerate(pool.map(client, range(CLIENTS))))


def missing_turns(server: ScriptedModelServer) -> list[str]:
    """Follow-ups that reached the model without one of the :data:`RECENT` turns of their
    session before them."""
    missed = []
    for request in server.requests:
        said = [m["content"] for m in request.json["messages"] if m["role"] == "user"]
        new = said[-1]
        client, number = new.split(" turn ")
        earlier = {f"{client} turn {i}" for i in range(max(0, int(number) - RECENT), int(number))}
        lacking = earlier - set(said)
        if lacking:
            missed.append(f"{new}: without {sorted(lacking)}")
    return missed


@contextmanager
def two_proxies(tmp_path: Path, server: ScriptedModelServer, store_url: str) -> Iterator[RoundRobin]:
    a = SingleProxy(tmp_path / "home-a", server, store_url)
    b = None
    relay = None
    try:
        b = SingleProxy(tmp_path / "home-b", server, store_url)
        relay = RoundRobin([a.port, b.port])
        yield relay
        assert a.stop() == 0 and b.stop() == 0, a.output() + b.output()
        LATE[:] = [line for line in (a.output() + b.output()).splitlines() if "WARNING" in line]
    finally:
        if relay is not None:
            relay.close()
        for proxy in (a, b):
            if proxy is not None:
                proxy.kill()


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_follow_ups_through_two_proxies_behind_a_round_robin_miss_no_turn(
    tmp_path: Path, server: ScriptedModelServer, store_url: str
) -> None:
    with two_proxies(tmp_path, server, store_url) as relay:
        ports = run_clients(relay.port)
    assert len(server.requests) == CLIENTS * TURNS
    # The relay alternated: most follow-ups went to the other process than their previous turn.
    moved = sum(
        relay.backend_of[used[i]] != relay.backend_of[used[i - 1]]
        for used in ports.values()
        for i in range(1, TURNS)
    )
    assert moved >= CLIENTS * (TURNS - 1) // 4, moved
    assert missing_turns(server) == [], LATE


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_follow_ups_through_two_workers_miss_no_turn(
    tmp_path: Path, server: ScriptedModelServer, store_url: str
) -> None:
    proxy = WorkersProcess(tmp_path / "home", server, store_url, workers=2)
    try:
        run_clients(proxy.port)
        assert proxy.stop() == 0, proxy.output()
        LATE[:] = [line for line in proxy.output().splitlines() if "WARNING" in line]

    finally:
        proxy.kill()
    assert len(server.requests) == CLIENTS * TURNS
    assert missing_turns(server) == [], LATE
