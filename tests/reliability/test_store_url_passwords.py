"""Passwords never shown: a store URL's password (in its user info, or as ``?password=``)
appears in no output, log or error of memtap: ``Memory.url``/``repr``, the CLI commands,
``memtap export``, error messages, the proxy's start-up log and ``mem:status``, and the
spool and capture logs of a store that fails."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import httpx
import openai
import pytest
from click.testing import CliRunner
from reliability_support import API_KEY

import memtap
import memtap_openai
from memtap.cli.main import main
from memtap.testing.server import ScriptedModelServer

PASSWORDS = ("hunter2XY", "s3cretPW77")
URL = f"memory://alice:{PASSWORDS[0]}@store.internal/db?password={PASSWORDS[1]}&region=eu"


def shown(text: str) -> list[str]:
    return [p for p in PASSWORDS if p in text]


def test_memory_url_and_repr_hide_the_password() -> None:
    with memtap.Memory(URL, entry_points=False) as mem:
        assert mem.url == "memory://alice:***@store.internal/db?password=***&region=eu"
        assert shown(repr(mem)) == [] and shown(str(mem.url)) == []
        assert mem.store.url == URL  # the store keeps the real one


@pytest.mark.parametrize(
    "args",
    [
        ["stats"],
        ["sessions"],
        ["facts", "--entity", "alice"],
        ["history", "s1"],
        ["recall", "anything", "--entity", "alice"],
        ["forget", "--entity", "alice", "--yes"],
        ["export", "-o", "-"],
    ],
    ids=lambda a: a[0],
)
def test_cli_commands_never_show_the_password(args: list[str]) -> None:
    result = CliRunner().invoke(main, [*args, "--store", URL])
    # An empty store: a command about an entity or session it lacks says so in one line.
    assert result.exit_code == 0 or (
        result.exit_code == 1 and result.output.startswith("Error: no ") and result.output.count("\n") == 1
    ), result.output
    assert shown(result.output + (result.stderr if result.stderr_bytes is not None else "")) == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresq://alice:hunter2XY@h/db?password=s3cretPW77",  # no plugin for the scheme
        "postgresql://alice:hunter2XY@127.0.0.1:1/db?password=s3cretPW77",  # nothing listens
        "postgresql://alice:hunter2XY@127.0.0.1:1/db?password=s3cretPW77&bogus=1",  # libpq rejects
        "postgresql://alice:hunter2XY@127.0.0.1:1/db?password=s3cretPW77&schema=bad-name",
        "postgresql://alice:hunter2XY@[::1/db?password=s3cretPW77",  # not a URL
    ],
)
def test_store_errors_never_show_the_password(url: str) -> None:
    result = CliRunner().invoke(main, ["stats", "--store", url])
    assert result.exit_code != 0
    assert "Error:" in result.output and "Traceback" not in result.output, result.output
    assert shown(result.output) == []
    with pytest.raises((memtap.StoreError, memtap.UnknownStoreURLError)) as caught:
        memtap.Memory(url)
    chain = "".join(traceback.format_exception(caught.value))  # the causes' messages too
    assert shown(chain) == []


def test_failing_store_and_spool_logs_never_show_the_password(
    server: ScriptedModelServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="memtap")
    mem = memtap.Memory(URL, plugins=[memtap_openai], entry_points=False, spool=tmp_path / "spool")
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    mem.store.close()  # the store fails from now on: every write is refused with its URL
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
    assert not mem.flush(0.5)
    mem.close(timeout=0.5)
    with memtap.Memory(URL, entry_points=False, spool=tmp_path / "spool"):  # replays, logs it
        pass
    messages = [r.getMessage() + (r.exc_text or "") for r in caplog.records]
    assert any("could not store" in m for m in messages)
    assert shown("\n".join(messages)) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_proxy_start_up_log_and_mem_status_never_show_the_password(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    port = _free_port()
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "memtap.cli", "proxy", "--store", URL, "--port", str(port)]
    cmd += ["--openai-upstream", server.base_url]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = b""
    try:
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        while b"memtap proxy on" not in output and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1)
            if ready:
                output += os.read(proc.stdout.fileno(), 65536)
            assert proc.poll() is None, output.decode()
        assert b"memtap proxy on" in output, output.decode()
        status = None
        while status is None:  # the log line comes just before the server listens
            try:
                status = httpx.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "mem:status"}]},
                    timeout=30,
                )
            except httpx.ConnectError:
                assert time.monotonic() < deadline and proc.poll() is None, output.decode()
                time.sleep(0.1)
        answer = status.json()["choices"][0]["message"]["content"]
        assert "memory://alice:***@store.internal" in answer
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
        output += rest or b""
    text = output.decode()
    assert "memtap proxy on" in text and "store memory://alice:***@" in text
    assert shown(text + answer) == []
