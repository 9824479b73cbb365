"""A DuckDB file another process holds (``memtap ui``, a CLI command, another worker) never
crashes the app: ``Memory()`` fails open, its calls are journaled to the spool and stored
once the holder stops; every CLI command on the held file prints one line naming the ways out."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

import memtap
from memtap.cli.main import main
from memtap.testing.server import ScriptedModelServer
from memtap_duckdb import DuckDBStore

HOLD = (
    "import sys\n"
    "from memtap_duckdb import DuckDBStore\n"
    "store = DuckDBStore(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
    "store.close()\n"
)
WAYS_OUT = ("memtap_ui.start(mem)", "memtap proxy --ui", "postgresql://")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("MEMTAP_HOME", str(home))
    monkeypatch.delenv("MEMTAP_STORE", raising=False)
    DuckDBStore(home / "memtap.duckdb").close()
    return home


@pytest.fixture
def holder(home: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the default DuckDB file until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home / "memtap.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    if proc.poll() is None:
        release(proc)


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def test_an_app_on_a_held_store_runs_and_stores_every_call_once_it_frees(home, holder, caplog):
    caplog.set_level(logging.WARNING, logger="memtap")
    with ScriptedModelServer() as server:
        mem = memtap.Memory(embedder=False)
        client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-locked-000000000000")
        )
        with mem.scope(entity_id="alice", session_id="held"):
            for i in range(3):
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"call {i}"}]
                )
                assert reply.choices[0].message.content
    warned = [r.getMessage() for r in caplog.records if "journaled to the spool" in r.getMessage()]
    assert len(warned) == 1, warned
    assert all(way in warned[0] for way in WAYS_OUT), warned[0]
    release(holder)
    assert mem.flush(timeout=60)
    mem.close()
    store = DuckDBStore(home / "memtap.duckdb")
    try:
        sent = [m.content for m in store.history(entity_id="alice", session_id="held") if m.role == "user"]
    finally:
        store.close()
    assert sent == ["call 0", "call 1", "call 2"]


@pytest.mark.parametrize(
    "args",
    [
        ["sessions"],
        ["history", "s1"],
        ["stats"],
        ["facts", "--entity", "alice"],
        ["recall", "tea", "--entity", "alice"],
        ["forget", "--entity", "alice", "--yes"],
        ["explain", "--session", "s1"],
        ["export", "-o", os.devnull],
        ["entities"],
        ["ui", "--port", "0"],
    ],
)
def test_every_cli_command_on_a_held_store_prints_one_line_with_the_ways_out(home, holder, args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert all(way in lines[0] for way in WAYS_OUT), lines[0]
