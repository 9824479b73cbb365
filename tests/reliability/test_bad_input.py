"""Bad input: malformed or truncated provider responses and streams, unknown clients and
sessions, a plugin that fails to import, a corrupted spool. A clear error or warning, and
the user's call unaffected (errors of the SDK's own stay the SDK's)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from reliability_support import API_KEY

import memtap
import memtap_openai
from memtap.testing.server import Reply, ScriptedModelServer
from memtap_duckdb.store import DuckDBStore

MALFORMED = [
    b"not json at all",
    b'{"id": "x", "choices": "not a list"}',
    b'{"choices": [{"message": {"role": "assistant", "content": 42}}]}',
    b"{}",
    b'{"id": "x", "choices": [{"index": 0, "message": {"role": "assistant"',
    b"\xff\xfe\x00garbage",
]


def _run(
    client: openai.OpenAI, server: ScriptedModelServer, reply: Reply, *, stream: bool
) -> tuple[str, Any]:
    """Outcome of one call: ("ok", value) or ("raised", exception type name)."""
    server.script(reply)
    try:
        if stream:
            out = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            return "ok", [c.model_dump() for c in out]
        return "ok", client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        ).model_dump()
    except Exception as exc:
        return "raised", type(exc).__name__


@pytest.fixture
def pair(server: ScriptedModelServer, tmp_path: Path) -> tuple[memtap.Memory, openai.OpenAI, openai.OpenAI]:
    mem = memtap.Memory(DuckDBStore(tmp_path / "m.duckdb"), plugins=[memtap_openai], entry_points=False)
    tapped = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    return mem, tapped, bare


@pytest.mark.parametrize("body", MALFORMED)
def test_malformed_responses_behave_as_without_memtap(
    pair: tuple[memtap.Memory, openai.OpenAI, openai.OpenAI],
    server: ScriptedModelServer,
    body: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mem, tapped, bare = pair
    expected = _run(bare, server, Reply(raw_body=body), stream=False)
    with caplog.at_level(logging.ERROR, logger="memtap"):
        got = _run(tapped, server, Reply(raw_body=body), stream=False)
        assert mem.flush(10)
    if expected[0] == "ok":
        expected[1].pop("id", None), got[1].pop("id", None)
    assert got == expected
    assert [r for r in caplog.records if r.levelno >= logging.ERROR and "format" not in r.getMessage()] == []
    mem.close()


@pytest.mark.parametrize("after", [0, 1, 2, 4])
def test_truncated_streams_behave_as_without_memtap(
    pair: tuple[memtap.Memory, openai.OpenAI, openai.OpenAI], server: ScriptedModelServer, after: int
) -> None:
    mem, tapped, bare = pair
    reply = Reply(text="a fairly long answer cut short", chunks=6, truncate_stream_after=after)
    expected = _run(bare, server, reply, stream=True)
    got = _run(tapped, server, reply, stream=True)
    assert got[0] == expected[0]
    if got[0] == "raised":
        assert got[1] == expected[1]
    assert mem.flush(10)
    for ex in mem.store.exchanges():
        assert ex.status in ("ok", "partial", "error")
    mem.close()


def test_error_statuses_are_the_sdks(
    pair: tuple[memtap.Memory, openai.OpenAI, openai.OpenAI], server: ScriptedModelServer
) -> None:
    mem, tapped, bare = pair
    for status in (400, 401, 429, 500, 503):
        assert _run(tapped, server, Reply(status=status, text="nope"), stream=False) == _run(
            bare, server, Reply(status=status, text="nope"), stream=False
        )
    mem.close()


def test_unknown_client_names_the_providers(tmp_path: Path) -> None:
    with (
        memtap.Memory(DuckDBStore(tmp_path / "m.duckdb"), plugins=[memtap_openai], entry_points=False) as mem,
        pytest.raises(memtap.UnsupportedClientError, match="openai"),
    ):
        mem.register(object())


def test_a_session_and_entity_the_store_has_never_seen(
    pair: tuple[memtap.Memory, openai.OpenAI, openai.OpenAI], server: ScriptedModelServer
) -> None:
    mem, tapped, _ = pair
    with mem.scope(entity_id="never-seen", session_id="brand-new"):
        reply = tapped.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "first words"}]
        )
    assert reply.choices[0].message.content == "You said: first words"
    assert len(server.requests[-1].json["messages"]) == 1
    assert len(mem.history("brand-new", entity_id="never-seen")) == 2
    mem.close()


def test_a_plugin_that_fails_to_import_is_named_and_skipped(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    dist = site / "memtap_broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: memtap-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[memtap]\nbroken = memtap_broken_plugin\n")
    (site / "memtap_broken_plugin.py").write_text("raise ImportError('this plugin is broken on purpose')\n")
    code = textwrap.dedent(
        f"""
        import warnings, openai, memtap
        warnings.simplefilter("always")
        mem = memtap.Memory("duckdb:///{tmp_path / "p.duckdb"}")
        c = mem.register(openai.OpenAI(base_url={server.openai_base_url!r}, api_key="sk-x", max_retries=0))
        r = c.chat.completions.create(model="m", messages=[{{"role": "user", "content": "still fine"}}])
        print(r.choices[0].message.content)
        mem.close()
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "You said: still fine"
    assert "broken" in proc.stderr and "failed to load" in proc.stderr


def test_corrupted_spool_file_skips_only_the_bad_records(
    server: ScriptedModelServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    counters: Callable[[], dict],
) -> None:
    from reliability_stores import FaultyStore

    spool_dir = tmp_path / "spool"
    store = FaultyStore(DuckDBStore(tmp_path / "m.duckdb"))
    store.down.set()
    mem = memtap.Memory(store, plugins=[memtap_openai], entry_points=False, spool=spool_dir)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    for i in range(4):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"kept {i}"}])
    mem.close(timeout=0.2)
    (segment,) = spool_dir.glob("*.jsonl")
    lines = segment.read_bytes().splitlines(keepends=True)
    garbage = b"\x00\x01 this is not json\n"
    segment.write_bytes(
        lines[0] + garbage + lines[1] + b'{"v": 1, "no id": true}\n' + lines[2] + lines[3][:40]
    )
    with caplog.at_level(logging.WARNING, logger="memtap.capture.spool"):
        again = memtap.Memory(
            DuckDBStore(tmp_path / "m.duckdb"), plugins=[memtap_openai], entry_points=False, spool=spool_dir
        )
        assert again.flush(30)
    assert [ex.input[0].content for ex in again.store.exchanges()] == ["kept 0", "kept 1", "kept 2"]
    warnings = [r.getMessage() for r in caplog.records if "is corrupted" in r.getMessage()]
    assert len(warnings) == 3 and all(str(segment) in w for w in warnings)
    assert any("truncated" in w for w in warnings)
    again.close()
    assert list(spool_dir.glob("*.jsonl")) == []
