"""``memtap proxy --workers N`` on PostgreSQL (#19, item 2): N processes accepting on the one
port; every request answered, every exchange stored once, a session's history following it
from one worker to the other; SIGTERM stops them all cleanly; a store the workers cannot
share is refused in one line."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import memtap
from memtap.testing.server import ScriptedModelServer

START = "from memtap.cli.main import main; main()"
#: Seconds a change takes to reach the other workers at most (docs/quickstart.md).
FEED_DELAY = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class WorkersProcess:
    """``memtap proxy --workers N`` in a subprocess."""

    def __init__(
        self, home: Path, upstream: ScriptedModelServer, store: str, workers: int, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
        env["MEMTAP_HOME"] = str(home)
        self.log = (home.parent / f"proxy-{self.port}.log").open("w+")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-c", START, "proxy", "--port", str(self.port), "--store", store),
                *("--openai-upstream", upstream.base_url, "--workers", str(workers), "--log-level", "info"),
                *extra,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.workers = workers
        deadline = time.monotonic() + 60
        while len(self.ready_workers()) < workers:
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "workers did not start:\n" + self.output()
            time.sleep(0.1)

    def worker_pids(self) -> list[int]:
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def ready_workers(self) -> list[int]:
        """The workers, once every one has started serving (uvicorn says so)."""
        return (
            self.worker_pids() if self.output().count("Application startup complete") >= self.workers else []
        )

    def serving(self, conn: http.client.HTTPConnection) -> int:
        """The worker that accepted ``conn`` (its socket's inode among the workers' files)."""
        assert conn.sock is not None
        client_port = conn.sock.getsockname()[1]
        here, there = f"0100007F:{self.port:04X}", f"0100007F:{client_port:04X}"
        deadline = time.monotonic() + 5  # until a worker has accepted it (inode 0 until then)
        while time.monotonic() < deadline:
            inodes = {
                fields[9]
                for fields in (line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:])
                if fields[1] == here and fields[2] == there and fields[9] != "0"
            }
            for pid in self.worker_pids():
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    try:
                        link = os.readlink(fd)
                    except OSError:
                        continue
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return pid
            time.sleep(0.02)
        raise AssertionError("no worker accepted the connection")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig: signal.Signals = signal.SIGTERM, limit: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(limit)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def chat(url: str, session: str, text: str) -> httpx.Response:
    """One call on a new connection (so that any worker may take it)."""
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": text}]},
        headers={"x-memtap-entity": "team", "x-memtap-session": session, "authorization": "Bearer sk-test"},
        timeout=30,
    )


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_two_workers_answer_200_requests_from_8_clients_and_store_each_once(
    tmp_path: Path, server: ScriptedModelServer, store_url: str
) -> None:
    proxy = WorkersProcess(tmp_path / "home", server, store_url, workers=2)
    try:
        assert len(proxy.worker_pids()) == 2

        def client(n: int) -> list[int]:
            return [chat(proxy.url, f"s{n}", f"client {n} turn {i}").status_code for i in range(25)]

        with ThreadPoolExecutor(8) as pool:
            statuses = [code for codes in pool.map(client, range(8)) for code in codes]
        assert statuses == [200] * 200
        assert len(server.requests) == 200
        assert proxy.stop() == 0, proxy.output()
        assert "Traceback" not in proxy.output()
    finally:
        proxy.kill()
    mem = memtap.Memory(store_url, spool=False, embedder=False)
    try:
        assert mem.stats()["exchanges"] == 200  # each once
        for n in range(8):
            said = [m.content for m in mem.history(f"s{n}", entity_id="team") if m.role == "user"]
            assert said == [f"client {n} turn {i}" for i in range(25)]
    finally:
        mem.close()


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_session_history_follows_it_across_workers(
    tmp_path: Path, server: ScriptedModelServer, store_url: str
) -> None:
    """Turns of one session alternate between the two workers: each turn gets the earlier
    ones injected, whichever worker served them."""
    proxy = WorkersProcess(tmp_path / "home", server, store_url, workers=2)
    conns: dict[int, http.client.HTTPConnection] = {}
    mem = memtap.Memory(store_url, spool=False, embedder=False)
    try:
        for _ in range(50):  # a connection on each worker
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            conn.connect()
            pid = proxy.serving(conn)
            if pid in conns:
                conn.close()
            else:
                conns[pid] = conn
            if len(conns) == 2:
                break
        assert len(conns) == 2, "the kernel gave every connection to one worker"
        order = list(conns.values())
        for turn in range(8):
            conn = order[turn % 2]
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"turn {turn}"}]})
            headers = {
                "content-type": "application/json",
                "x-memtap-entity": "team",
                "x-memtap-session": "hs",
            }
            conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
            response = conn.getresponse()
            assert response.status == 200
            response.read()
            sent = [m["content"] for m in server.requests[-1].json["messages"] if m["role"] == "user"]
            assert [t for t in sent if t.startswith("turn ")] == [f"turn {i}" for i in range(turn + 1)], sent
            # stored by the worker that served it, then the feed tells the other one
            deadline = time.monotonic() + FEED_DELAY
            while len(mem.store.history("hs", entity_id="team")) < 2 * (turn + 1):
                assert time.monotonic() < deadline, "the turn was not stored"
                time.sleep(0.01)
            time.sleep(0.5)
        assert proxy.stop() == 0, proxy.output()
    finally:
        for conn in conns.values():
            conn.close()
        proxy.kill()
        mem.close()


@pytest.mark.parametrize("store", ["memory://", "duckdb:///{tmp}/memtap.duckdb", None])
def test_workers_refuse_a_store_they_cannot_share(tmp_path: Path, store: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
    env["MEMTAP_HOME"] = str(tmp_path / "home")
    args = [sys.executable, "-c", START, "proxy", "--port", str(free_port()), "--workers", "2"]
    if store is not None:
        args += ["--store", store.format(tmp=tmp_path)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--workers 2 needs a store the workers can share" in errors[0], done.stderr
    assert not (tmp_path / "home").exists() or not list((tmp_path / "home").rglob("*.duckdb"))


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_dead_worker_is_replaced_and_workers_stop_when_the_parent_is_killed(
    tmp_path: Path, server: ScriptedModelServer, store_url: str
) -> None:
    proxy = WorkersProcess(tmp_path / "home", server, store_url, workers=2)
    try:
        first = proxy.worker_pids()
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (len(proxy.worker_pids()) == 2 and first[0] not in proxy.worker_pids()):
            assert time.monotonic() < deadline, proxy.output()
            time.sleep(0.1)
        assert eventually_started(proxy, 3), proxy.output()  # the replacement serves
        assert chat(proxy.url, "s", "still served").status_code == 200
        workers = proxy.worker_pids()
        proxy.proc.kill()  # the parent, without a chance to stop its workers
        proxy.proc.wait()
        deadline = time.monotonic() + 15
        while any(Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid) for pid in workers):
            assert time.monotonic() < deadline, "workers outlived their parent"
            time.sleep(0.1)
    finally:
        proxy.kill()


def eventually_started(proxy: WorkersProcess, count: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while proxy.output().count("Application startup complete") < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"


def connections_on_each_worker(proxy: WorkersProcess) -> list[http.client.HTTPConnection]:
    """One open connection per worker (new connections until the kernel has handed one to
    each)."""
    conns: dict[int, http.client.HTTPConnection] = {}
    for _ in range(50):
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        conn.connect()
        pid = proxy.serving(conn)
        if pid in conns:
            conn.close()
        else:
            conns[pid] = conn
        if len(conns) == proxy.workers:
            return list(conns.values())
    raise AssertionError("the kernel gave every connection to one worker")


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_forget_form_served_by_one_worker_is_taken_by_the_other(
    tmp_path: Path, server: ScriptedModelServer, store_url: str
) -> None:
    """The UI's CSRF key is shared by the workers (issue 35, item 6): under ``--workers 2
    --ui`` a forget form one worker served deletes the fact through the other; a form
    without the token is still refused there."""
    mem = memtap.Memory(store_url, spool=False, embedder=False)
    fact = mem.remember("Alice lives in Kyoto", entity_id="alice")
    proxy = WorkersProcess(tmp_path / "home", server, store_url, workers=2, extra=("--ui",))
    conns: list[http.client.HTTPConnection] = []
    try:
        conns = connections_on_each_worker(proxy)
        first, second = conns
        first.request("GET", "/_memtap/entities/alice")
        page = first.getresponse().read().decode()
        found = re.search(r'name="csrf" value="(\w+)"', page)
        assert found is not None, page
        headers = {"content-type": "application/x-www-form-urlencoded", "origin": proxy.url}
        second.request("POST", "/_memtap/entities/alice/forget", body=f"fact_id={fact.id}", headers=headers)
        refused = second.getresponse()
        refused.read()
        assert refused.status == 403  # no token: refused
        form = f"csrf={found.group(1)}&fact_id={fact.id}"
        second.request("POST", "/_memtap/entities/alice/forget", body=form, headers=headers)
        done = second.getresponse()
        done.read()
        assert done.status == 303, done.status
        assert all(f.id != fact.id for f in mem.facts(entity_id="alice"))
        assert proxy.stop() == 0, proxy.output()
    finally:
        for conn in conns:
            conn.close()
        proxy.kill()
        mem.close()
