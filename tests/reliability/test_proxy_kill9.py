"""``kill -9`` of proxy workers under load loses no call a client received complete (issue 35,
item 2): at least 2,000 requests, JSON and SSE, from 8 clients through ``memtap proxy
--workers 2`` on PostgreSQL while workers are killed with SIGKILL at random instants (a
bounded number of times, each worker up a while first so the supervisor restarts it).
After the proxy stops and a Memory on the same store and home replays what the killed
workers left in their spools, every call whose answer a client read whole (a JSON body; a
stream through its ``[DONE]``) is in the store. Loopback only; bounded in count and time
(about a minute on a 2-core machine)."""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_proxy_workers import WorkersProcess

import memtap
from memtap.testing.server import ScriptedModelServer

CLIENTS = 8
REQUESTS = 2000
KILLS = 6
#: A worker is killed only after it has served this long (the supervisor gives up on
#: workers that die within 2 s of starting, twice in a row).
UP_BEFORE_KILL = 3.0
TIME_LIMIT = 150.0


def one_call(port: int, client: int, number: int) -> bool:
    """One call on a new connection; whether the client read its answer whole."""
    stream = number % 2 == 1
    text = f"k{client}-{number}"
    body = json.dumps({"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]})
    headers = {
        "content-type": "application/json",
        "x-memtap-entity": "team",
        "x-memtap-session": f"k{client}",
    }
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            return False
        if stream:
            return b"data: [DONE]" in data
        json.loads(data)
        return True
    except (OSError, http.client.HTTPException, ValueError):
        return False  # cut by a kill: the client did not get it whole
    finally:
        conn.close()


class Killer(threading.Thread):
    """SIGKILLs a worker that has been up :data:`UP_BEFORE_KILL` s, at random instants."""

    def __init__(self, proxy: WorkersProcess, stop: threading.Event, seed: int) -> None:
        super().__init__(daemon=True)
        self.proxy = proxy
        self.stop_event = stop
        self.random = random.Random(seed)
        self.first_seen: dict[int, float] = {}
        self.killed: list[int] = []

    def run(self) -> None:
        while len(self.killed) < KILLS and not self.stop_event.wait(self.random.uniform(0.2, 1.5)):
            now = time.monotonic()
            for pid in self.proxy.worker_pids():
                self.first_seen.setdefault(pid, now)
            ripe = [
                p
                for p, seen in self.first_seen.items()
                if now - seen >= UP_BEFORE_KILL and p not in self.killed
            ]
            ripe = [p for p in ripe if p in self.proxy.worker_pids()]
            if ripe:
                pid = self.random.choice(ripe)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.killed.append(pid)


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_kill_9_of_workers_under_load_loses_no_call_answered_complete(
    tmp_path: Path, server: ScriptedModelServer, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    proxy = WorkersProcess(home, server, store_url, workers=2)
    stop = threading.Event()
    killer = Killer(proxy, stop, seed=35)
    started = time.monotonic()
    complete: list[str] = []
    try:
        killer.start()

        def client(n: int) -> list[str]:
            done = []
            for i in range(REQUESTS // CLIENTS):
                if time.monotonic() - started > TIME_LIMIT:
                    break
                if one_call(proxy.port, n, i):
                    done.append(f"k{n}-{i}")
            return done

        with ThreadPoolExecutor(CLIENTS) as pool:
            complete = [text for texts in pool.map(client, range(CLIENTS)) for text in texts]
        stop.set()
        killer.join(10)
        assert proxy.stop() == 0, proxy.output()
    finally:
        stop.set()
        proxy.kill()
    print(f"{len(complete)} calls answered complete, {len(killer.killed)} workers killed")
    assert len(killer.killed) >= 3, f"only {len(killer.killed)} kills"
    assert len(complete) >= REQUESTS * 0.9, f"{len(complete)} calls completed"
    # What the killed workers journaled and did not store is replayed by the next Memory
    # on the same store and home (as a restarted proxy would).
    monkeypatch.setenv("MEMTAP_HOME", str(home))
    mem = memtap.Memory(store_url, embedder=False)
    try:
        assert mem.flush(60)
        stored = {
            m.content
            for n in range(CLIENTS)
            for m in mem.store.history(f"k{n}", entity_id="team")
            if m.role == "user"
        }
    finally:
        mem.close()
    missing = sorted(set(complete) - stored)
    assert missing == [], f"{len(missing)} of {len(complete)} calls answered complete are not stored"
