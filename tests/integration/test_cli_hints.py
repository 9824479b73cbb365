"""The CLI's hints lead somewhere: install hints name folders that exist, a missing UI
package says how to get it, typos (an unknown session or entity) fail in one line, a plain
``.duckdb`` path is a store, a transcript given to ``import`` points at
``import-transcript``, ``memtap entities`` lists who has memory, and the servers say which
store they serve."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import memtap
from memtap.cli.main import MemtapGroup, main
from memtap.errors import install_hint
from memtap.memory import plugin_manager
from memtap.protocol.model import Attribution, Exchange, Message

REPO = Path(__file__).resolve().parents[2]


# Own store: a DuckDB file with sessions (the CLI under test opens it).
@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "app.duckdb"
    with memtap.Memory(f"duckdb:///{path}", spool=False, embedder=False) as mem:
        mem.store.write_exchanges(
            [
                Exchange(
                    attribution=Attribution(entity_id="alice", session_id="s1"),
                    provider="t",
                    operation="chat",
                    input=[Message("user", "I live in Tokyo")],
                    output=[Message("assistant", "Nice!")],
                )
            ]
        )
        mem.remember("Bob likes tea", entity_id="bob")
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "distribution", ["memtap-mcp", "memtap-ui", "memtap-proxy", "memtap-langchain", "memtap-duckdb"]
)
def test_install_hints_name_folders_that_exist(distribution):
    folder = install_hint(distribution).rsplit("pip install ", 1)[1].rstrip("`)")
    assert (REPO / folder / "pyproject.toml").is_file(), install_hint(distribution)


@pytest.mark.parametrize(("command", "folder"), [("ui", "./contrib/ui"), ("mcp", "./contrib/mcp")])
def test_a_missing_plugin_command_says_how_to_get_it(command, folder):
    cli = MemtapGroup(name="memtap")
    cli.add_plugin_commands(plugin_manager(entry_points=False))
    result = CliRunner().invoke(cli, [command])
    assert result.exit_code == 1, result.output
    assert "No such command" not in result.output
    assert f"memtap-{command}" in result.output and folder in result.output, result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["history", "nosuch"], "no session 'nosuch'"),
        (["history", "s1", "--entity", "nobody"], "no session 's1' of entity 'nobody'"),
        (["forget", "--entity", "nobody", "--yes"], "no entity 'nobody'"),
        (["facts", "--entity", "nobody"], "no entity 'nobody'"),
        (["recall", "tea", "--entity", "nobody"], "no entity 'nobody'"),
        (["sessions", "--entity", "nobody"], "no entity 'nobody'"),
    ],
)
def test_an_unknown_session_or_entity_fails_in_one_line(store, args, says):
    code, out = invoke(*args, "--store", f"duckdb:///{store}")
    assert code == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "memtap entities" in lines[0], out


def test_known_ones_still_work(store):
    code, out = invoke("history", "s1", "--store", f"duckdb:///{store}")
    assert code == 0 and "I live in Tokyo" in out, out
    code, out = invoke("facts", "--entity", "bob", "--store", f"duckdb:///{store}")
    assert code == 0 and "Bob likes tea" in out, out


def test_entities_lists_who_has_memory(store):
    code, out = invoke("entities", "--store", f"duckdb:///{store}")
    assert code == 0, out
    assert "alice" in out and "bob" in out
    code, out = invoke("entities", "--json", "--store", f"duckdb:///{store}")
    assert code == 0 and json.loads(out) == ["alice", "bob"], out


@pytest.mark.parametrize("relative", [False, True])
def test_a_plain_duckdb_path_is_a_store(store, relative, monkeypatch):
    monkeypatch.chdir(store.parent)
    plain = store.name if relative else str(store)
    code, out = invoke("facts", "--entity", "bob", "--store", plain)
    assert code == 0 and "Bob likes tea" in out, out
    with memtap.Memory(plain, spool=False, embedder=False) as mem:
        assert [f.text for f in mem.facts(entity_id="bob")] == ["Bob likes tea"]
        assert mem.url == f"duckdb:///{store}"


def test_import_given_a_transcript_says_to_use_import_transcript(tmp_path):
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n", encoding="utf-8")
    code, out = invoke("import", str(transcript), "--store", f"duckdb:///{tmp_path / 'x.duckdb'}")
    assert code == 1, out
    errors = [line for line in out.splitlines() if line.startswith("Error")]  # (and the progress bar)
    assert len(errors) == 1 and "memtap import-transcript" in errors[0] and "--entity" in errors[0], out


def test_memtap_mcp_says_on_stderr_which_store_it_serves(store, tmp_path):
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
    env.pop("MEMTAP_STORE", None)
    done = subprocess.run(
        [sys.executable, "-m", "memtap.cli", "mcp", "--store", f"duckdb:///{store}"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.stdout == ""  # stdout is the protocol
    assert f"memtap mcp: serving store duckdb:///{store}" in done.stderr, done.stderr


def test_memtap_proxy_says_which_store_it_serves(store, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
    env.pop("MEMTAP_STORE", None)
    command = [
        sys.executable,
        "-m",
        "memtap.cli",
        "proxy",
        "--port",
        str(port),
        "--store",
        f"duckdb:///{store}",
    ]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "serving store" in line:
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        found.wait(60)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(30)
    assert any(f"serving store duckdb:///{store}" in line for line in seen), seen
