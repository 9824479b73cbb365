"""Other local users read nothing: MEMTAP_HOME and the spool directories are 0700, the spool
segments, the DuckDB file and its write-ahead log 0600 — with the most permissive umask,
after DuckDB checkpoints (it makes a new log each time), and for files an older memtap left
world-readable."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from reliability_support import API_KEY

import memtap
from memtap.testing.server import ScriptedModelServer


@pytest.fixture
def open_umask(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MEMTAP_STORE", raising=False)
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _calls(mem: memtap.Memory, server: ScriptedModelServer, n: int) -> None:
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    for i in range(n):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"secret plan {i}"}])


def test_home_spool_and_store_are_private_whatever_the_umask(
    open_umask: None, server: ScriptedModelServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with memtap.Memory() as mem:  # the default store: a DuckDB file in MEMTAP_HOME
        # DuckDB makes a new write-ahead log after every checkpoint: checkpoint often.
        mem.store._conn.execute("PRAGMA wal_autocheckpoint='1KB'")  # type: ignore[attr-defined]
        _calls(mem, server, 20)
        assert mem.flush(30)
        assert mem.spool is not None
        segments = list(mem.spool.directory.glob("*.jsonl"))
        assert segments, "no spool segment to check"
        paths = {
            "MEMTAP_HOME": home,
            "spool": home / "spool",
            "store's spool": mem.spool.directory,
            "spool segment": segments[0],
            "DuckDB file": home / "memtap.duckdb",
            "DuckDB write-ahead log": home / "memtap.duckdb.wal",
        }
        modes = {name: oct(_mode(path)) for name, path in paths.items()}
    wanted = {name: oct(0o700 if path.is_dir() else 0o600) for name, path in paths.items()}
    assert modes == wanted


def test_what_an_older_version_left_open_is_closed(
    open_umask: None, server: ScriptedModelServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    with memtap.Memory() as mem:
        _calls(mem, server, 1)
    for path in (home, home / "spool"):
        os.chmod(path, 0o755)
    os.chmod(home / "memtap.duckdb", 0o644)
    with memtap.Memory() as mem:
        _calls(mem, server, 1)
        assert mem.flush(30)
    assert oct(_mode(home)) == oct(0o700)
    assert oct(_mode(home / "memtap.duckdb")) == oct(0o600)
