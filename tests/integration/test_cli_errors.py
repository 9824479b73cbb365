"""The CLI never surprises: every command given bad input exits non-zero with one line and
no traceback, and commands that only read never create a store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner, Result

import memtap
from memtap.cli.main import main
from memtap.testing.server import ScriptedModelServer

#: The missing DuckDB file every store command is pointed at (under a missing directory).
MISSING = "missing-dir/x.duckdb"

#: Commands that only read (or delete from) a store: on a missing store they must fail and
#: create nothing.
READERS = {
    "sessions": [],
    "history": ["s1"],
    "stats": [],
    "entities": [],
    "facts": ["--entity", "alice"],
    "recall": ["where?", "--entity", "alice"],
    "export": ["-o", "-"],
    "forget": ["--entity", "alice", "--yes"],
    "explain": ["no-such-exchange"],
}


def filled(tmp: Path) -> str:
    """The store the ``tmp`` fixture filled."""
    return f"duckdb:///{tmp / 'filled.duckdb'}"


def bad_invocations(tmp: Path) -> dict[str, list[list[str]]]:
    """Bad arguments for every command (a new command must be added here: see below)."""
    missing = f"duckdb:///{tmp / MISSING}"
    cases: dict[str, list[list[str]]] = {
        name: [
            [*args, "--store", missing],
            [*args, "--store", "nosuch://x"],
            [*args, "--store", "duckdb://x"],
        ]
        for name, args in READERS.items()
    }
    cases["export"].append(["--store", filled(tmp), "-o", str(tmp / "no" / "x.jsonl")])
    cases["import"] = [
        [str(tmp / "no-such.jsonl"), "--store", f"duckdb:///{tmp / 'import.duckdb'}"],
        [str(tmp / "not-an-export.jsonl"), "--store", f"duckdb:///{tmp / 'import.duckdb'}"],
        [str(tmp / "not-an-export.jsonl"), "--store", "nosuch://x"],
    ]
    transcript = str(tmp / "transcript.jsonl")
    into = f"duckdb:///{tmp / 'transcript.duckdb'}"
    cases["import-transcript"] = [
        [str(tmp / "no-such.jsonl"), "--entity", "alice", "--store", into],
        [str(tmp / "not-an-export.jsonl"), "--entity", "alice", "--store", into],  # not JSON
        [transcript, "--store", into],  # no --entity
        [transcript, "--entity", "alice", "--store", "nosuch://x"],
        [transcript, "--entity", "alice", "--store", "duckdb://x"],
        [str(tmp / "latin1.jsonl"), "--entity", "alice", "--store", into],
    ]
    cases["quarantine"] = [
        ["list", "--store", missing],
        ["list", "--store", "nosuch://x"],
        ["retry", "--store", filled(tmp)],  # neither ids nor --all
        ["drop", "--all", "--store", filled(tmp)],  # cannot ask: --yes
    ]
    cases["demo"] = [["--store", "nosuch://x"], ["--store", "duckdb://x"]]
    cases["plugins"] = [["--no-such-option"]]
    cases["proxy"] = [["--port", "not-a-port"]]
    cases["mcp"] = [["--port", "not-a-port"]]
    cases["ui"] = [["--port", "not-a-port"], ["--host", "0.0.0.0", "--store", filled(tmp)]]  # no --token
    cases["explain"] += [
        ["no-such-exchange", "--store", filled(tmp)],  # an unknown id
        ["--store", filled(tmp)],  # neither an id nor --session
        ["no-such-exchange", "--last", "--store", filled(tmp)],
        ["--session", "no-such-session", "--last", "--store", filled(tmp)],
    ]
    return cases


def one_line_error(result: Result) -> str:
    """The single error line of a failed invocation (asserting there is no more)."""
    assert result.exit_code not in (0, None), result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "not-an-export.jsonl").write_text("this is not JSON\n", encoding="utf-8")
    line = {"role": "user", "content": "I adopted a beagle", "at": "2023-05-08T13:56:00Z"}
    (tmp_path / "transcript.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    (tmp_path / "latin1.jsonl").write_bytes(
        json.dumps({**line, "content": "caf\u00e9"}, ensure_ascii=False).encode("latin-1")
    )
    with memtap.Memory(filled(tmp_path), spool=False) as mem:
        mem.remember("Alice lives in Tokyo", entity_id="alice")
    return tmp_path


def test_every_command_has_bad_invocations(tmp: Path) -> None:
    assert set(main.commands) <= set(bad_invocations(tmp))


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_with_bad_arguments_fails_in_one_line(
    command: str, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_HOME", str(tmp / "home"))
    for args in bad_invocations(tmp)[command]:
        result = CliRunner().invoke(main, [command, *args])
        one_line_error(result)


@pytest.mark.parametrize("command", sorted(READERS))
def test_reading_a_missing_store_creates_nothing(command: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMTAP_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / MISSING
    for store in (f"duckdb:///{path}", f"duckdb:///{MISSING}"):  # absolute, relative
        result = CliRunner().invoke(main, [command, *READERS[command], "--store", store])
        line = one_line_error(result)
        assert f"no memtap store at {path if store.startswith('duckdb:////') else MISSING}" in line
        assert "run your app or `memtap demo` first" in line
        assert result.output.strip() == line
    # The default store (under $MEMTAP_HOME) is not created either.
    result = CliRunner().invoke(main, [command, *READERS[command]], env={"MEMTAP_STORE": None})
    assert f"no memtap store at {tmp_path / 'home' / 'memtap.duckdb'}" in one_line_error(result)
    assert os.listdir(tmp_path) == []


def test_reading_an_existing_store_still_works(tmp: Path) -> None:
    result = CliRunner().invoke(main, ["facts", "--entity", "alice", "--store", filled(tmp)])
    assert result.exit_code == 0, result.output
    assert "Alice lives in Tokyo" in result.output


def test_export_into_a_missing_directory_is_one_line(tmp: Path) -> None:
    target = tmp / "no" / "such" / "x.jsonl"
    result = CliRunner().invoke(main, ["export", "--store", filled(tmp), "-o", str(target)])
    line = one_line_error(result)
    assert str(target) in line
    assert not target.parent.exists()


def test_import_twice_reports_what_was_new(tmp: Path) -> None:
    with ScriptedModelServer() as server:
        mem = memtap.Memory(filled(tmp), spool=False)
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-x"))
        with mem.scope(entity_id="alice", session_id="s1"):
            for text in ("I live in Tokyo", "I like tea"):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        mem.close()
    runner = CliRunner()
    export = tmp / "x.jsonl"
    result = runner.invoke(main, ["export", "--store", filled(tmp), "-o", str(export)])
    assert result.exit_code == 0, result.output
    records = [json.loads(line)["type"] for line in export.read_text().splitlines()[1:]]
    exchanges, facts = records.count("exchange"), records.count("fact")
    assert exchanges == 2 and facts >= 2  # the turns, and (at least) the user's as episodes
    target = f"duckdb:///{tmp / 'copy.duckdb'}"
    first = runner.invoke(main, ["import", str(export), "--store", target])
    assert first.exit_code == 0, first.output
    assert f"imported {exchanges} new exchange(s) and {facts} new fact(s)" in first.output
    assert "already present" not in first.output
    second = runner.invoke(main, ["import", str(export), "--store", target])
    assert second.exit_code == 0, second.output
    assert (
        f"imported 0 new exchange(s) and 0 new fact(s); {exchanges} exchange(s) and {facts} fact(s) "
        "were already present"
    ) in second.output


def test_stats_title_is_not_wrapped_to_the_table(tmp: Path) -> None:
    url = filled(tmp)
    result = CliRunner().invoke(main, ["stats", "--store", url], env={"COLUMNS": str(len(url) + 20)})
    assert result.exit_code == 0, result.output
    assert f"store {url}" in result.output


def test_history_prints_messages_as_sent(tmp: Path) -> None:
    with ScriptedModelServer() as server:
        mem = memtap.Memory(filled(tmp), spool=False)
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-x"))
        with mem.scope(entity_id="alice", session_id="s1"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "look at [bold]this[/bold]"}]
            )
        mem.close()
    result = CliRunner().invoke(main, ["history", "s1", "--store", filled(tmp)])
    assert result.exit_code == 0, result.output
    assert "user: look at [bold]this[/bold]" in result.output
