"""The spool belongs to the store, not to the URL: a process that left calls unstored (a
crash, or a close while its store was down) is replayed by the next process on the same
data even when that one reaches it by another URL (a rotated password, another host name,
a symlinked path). The start-up message says which of the two happened; a clean stop says
nothing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from reliability_support import pg_base_url, with_schema

import memtap
from memtap.testing.server import ScriptedModelServer

CHILD = Path(__file__).with_name("child_spool.py")
CALLS = 6


def _run_child(store_url: str, server: ScriptedModelServer, home: Path, ending: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(CHILD), store_url, server.openai_base_url, str(CALLS), ending],
        env={**os.environ, "MEMTAP_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "calls done" in proc.stdout, proc.stderr
    if ending == "kill":
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
    assert list(home.glob("spool/*/*.jsonl")), "the child left nothing in its spool"


def _replayed(store_url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("MEMTAP_HOME", str(home))
    with memtap.Memory(store_url) as mem:
        assert mem.flush(30)
        texts = [m.content for m in mem.store.history("s-spool", entity_id="e-spool") if m.role == "user"]
    assert not list(home.glob("spool/*/*.jsonl")), "replayed segments were left behind"
    return texts


@pytest.fixture
def pg_urls() -> Iterator[tuple[str, str]]:
    """Two URLs of one PostgreSQL schema: another password, another host name."""
    base = pg_base_url()
    parts = urlsplit(base)
    schema = f"memtap_ident_{uuid.uuid4().hex[:12]}"
    user = parts.username or "postgres"
    port = parts.port or 5432

    def url(password: str, host: str) -> str:
        return with_schema(urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}:{port}")), schema)

    yield url("old-secret", "127.0.0.1"), url("rotated-secret", "localhost")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("ending", ["kill", "close"])
def test_a_symlinked_path_to_the_same_duckdb_file_replays_the_spool(
    ending: str, server: ScriptedModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    home = tmp_path / "home"
    _run_child(f"duckdb:///{tmp_path / 'real' / 'm.duckdb'}", server, home, ending)
    texts = _replayed(f"duckdb:///{tmp_path / 'alias' / 'm.duckdb'}", home, monkeypatch)
    assert texts == [f"spooled {i}" for i in range(CALLS)]


@pytest.mark.parametrize("ending", ["kill", "close"])
def test_a_rotated_password_and_host_alias_replay_the_spool(
    ending: str,
    pg_urls: tuple[str, str],
    server: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, after = pg_urls
    home = tmp_path / "home"
    _run_child(before, server, home, ending)
    assert "old-secret" not in "".join(str(p) for p in home.rglob("*"))
    texts = _replayed(after, home, monkeypatch)
    assert texts == [f"spooled {i}" for i in range(CALLS)]


def _startup_messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "memtap.capture.spool"]


@pytest.mark.parametrize(
    ("ending", "level", "says"),
    [
        ("kill", logging.WARNING, "ended without closing memtap (a crash"),
        ("close", logging.INFO, "could not store before it closed (its store was unavailable)"),
    ],
)
def test_start_up_tells_a_crash_from_a_close_with_the_store_down(
    ending: str,
    level: int,
    says: str,
    server: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, home = f"duckdb:///{tmp_path / 'm.duckdb'}", tmp_path / "home"
    _run_child(url, server, home, ending)
    with caplog.at_level(logging.INFO, logger="memtap.capture.spool"):
        _replayed(url, home, monkeypatch)
    ((found_level, message),) = _startup_messages(caplog)
    assert found_level == level
    assert f"{CALLS} captured call(s)" in message and says in message


def test_start_up_after_a_clean_stop_says_nothing(
    server: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import openai

    url = f"duckdb:///{tmp_path / 'm.duckdb'}"
    with memtap.Memory(url) as mem:
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-x", max_retries=0))
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with caplog.at_level(logging.INFO, logger="memtap.capture.spool"), memtap.Memory(url):
        pass
    assert _startup_messages(caplog) == []


def test_a_spool_an_older_version_keyed_by_the_url_is_replayed(
    server: ScriptedModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    url, home = f"duckdb:///{tmp_path / 'm.duckdb'}", tmp_path / "home"
    _run_child(url, server, home, "kill")
    (current,) = home.glob("spool/*")
    legacy = home / "spool" / hashlib.sha256(url.encode()).hexdigest()[:20]
    current.rename(legacy)  # where a version that keyed spools by the URL string left it
    assert _replayed(url, home, monkeypatch) == [f"spooled {i}" for i in range(CALLS)]
    assert not legacy.exists()
