"""``memtap proxy`` stops cleanly on SIGTERM and SIGINT (issue #13 item 3).

A real ``memtap proxy`` process with a DuckDB store in a temporary ``MEMTAP_HOME``: calls
go through it (one still under way when the signal comes), then the signal. It must finish
the call under way, close its Memory (everything stored, the spool empty) and exit 0; the
next start finds nothing to replay.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from proxy_support import API_KEY

import memtap
from memtap.testing.server import Reply, ScriptedModelServer

START = "from memtap.cli.main import main; main()"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ProxyProcess:
    """``memtap proxy`` in a subprocess on a free port, its stderr kept in a file."""

    def __init__(self, home: Path, upstream: ScriptedModelServer, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
        env["MEMTAP_HOME"] = str(home)
        self.log = (home.parent / f"proxy-{self.port}.log").open("w+")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-c", START, "proxy", "--port", str(self.port)),
                *("--openai-upstream", upstream.base_url, "--session", "default"),
                *("--log-level", "info", *extra),
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        pytest.fail("memtap proxy did not start:\n" + self.output())

    def stop(self, sig: signal.Signals = signal.SIGTERM, limit: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(limit)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def spooled_files(home: Path) -> list[Path]:
    spool = home / "spool"
    return [p for p in spool.rglob("*") if p.is_file() and p.stat().st_size > 0] if spool.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_drains_closes_and_exits_0(tmp_path, upstream, sig) -> None:
    home = tmp_path / "home"
    proxy = ProxyProcess(home, upstream)
    try:
        oai = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
        for i in range(5):
            r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {i}"}])
            assert r.choices[0].message.content == f"You said: turn {i}"
        # one call still under way when the signal comes: it must be answered, and stored
        upstream.script(Reply(text="late answer", delay=1.5))
        answers: list[str] = []
        late = threading.Thread(
            target=lambda: answers.append(
                oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "late"}])
                .choices[0]
                .message.content
                or ""
            )
        )
        late.start()
        deadline = time.monotonic() + 10
        while len(upstream.requests) < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        code = proxy.stop(sig)
        late.join(10)
        output = proxy.output()
        assert code == 0, output
        assert answers == ["late answer"]
        assert "Traceback" not in output
        with pytest.raises(httpx.ConnectError):  # no longer accepting
            httpx.get(proxy.url + "/v1/models")
    finally:
        proxy.kill()

    assert spooled_files(home) == []
    # the next start has nothing to replay (and says nothing about a crash)
    again = ProxyProcess(home, upstream)
    try:
        assert again.stop() == 0
        output = again.output()
        assert "replay" not in output and "crash" not in output, output
    finally:
        again.kill()

    mem = memtap.Memory(f"duckdb:///{home / 'memtap.duckdb'}", spool=False)
    try:
        contents = [m.content for m in mem.history("default", entity_id="default")]
    finally:
        mem.close()
    expected = [text for i in range(5) for text in (f"turn {i}", f"You said: turn {i}")]
    assert contents == [*expected, "late", "late answer"]


def test_a_call_longer_than_the_drain_timeout_does_not_hold_the_stop(tmp_path, upstream) -> None:
    home = tmp_path / "home"
    proxy = ProxyProcess(home, upstream, "--drain-timeout", "1")
    try:
        # The call takes far longer than the drain bound plus closing, even on a loaded
        # machine (where closing the store and its threads has taken over 5 s): a stop that
        # waited for it would take 30 s.
        upstream.script(Reply(text="too late", delay=30))
        client = httpx.Client(base_url=proxy.url, timeout=60)
        result: list[object] = []

        def call() -> None:
            try:
                result.append(client.post("/v1/chat/completions", json={"model": "m", "messages": []}))
            except httpx.HTTPError as exc:
                result.append(exc)

        pending = threading.Thread(target=call)
        pending.start()
        deadline = time.monotonic() + 10
        while not upstream.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        start = time.monotonic()
        assert proxy.stop() == 0, proxy.output()
        assert time.monotonic() - start < 15  # the drain bound (1 s) and closing, not the call
        pending.join(60)
    finally:
        proxy.kill()
    assert spooled_files(home) == []
