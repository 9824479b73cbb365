"""The default distribution end to end: `memtap demo` and the CLI on a DuckDB file, with the
real openai SDK against the local scripted server."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import openai
import pytest
from click.testing import CliRunner

import memtap
from memtap.cli.main import main
from memtap.testing.imports import imported_by_the_command_line
from memtap.testing.server import ScriptedModelServer

NEEDS_PROXY = (
    "memtap proxy needs the memtap-proxy package: `pip install memtap-proxy` "
    "(from a clone of memtap: `pip install ./contrib/proxy`)"
)


@pytest.fixture
def store_url(tmp_path):
    return f"duckdb:///{tmp_path / 'cli.duckdb'}"


@pytest.fixture
def filled(store_url):
    with ScriptedModelServer() as server:
        mem = memtap.Memory(store_url)
        client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-cli-test-key-000000000000")
        )
        with mem.scope(entity_id="alice", session_id="s1", process_id="bot"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "I live in Tokyo"}]
            )
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "I like tea"}])
        with mem.scope(entity_id="bob", session_id="s2"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "bob here"}])
        mem.remember("Alice lives in Tokyo", entity_id="alice")
        mem.close()
    return store_url


def run(*args, env=None):
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_memory_persists_across_memory_instances_on_duckdb(filled):
    with ScriptedModelServer() as server:
        mem = memtap.Memory(filled)
        # A first call waits for its session's read 0.25 s at most (then goes without it):
        # this test is about persistence, not about a loaded machine's disk.
        mem.histories.deadline = 10.0
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-x"))
        with mem.scope(entity_id="alice", session_id="s1"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "where do I live?"}]
            )
        # (The memory block of recalled facts, a system message, may come too: the first
        # call waits 0.25 s for them. This test is about the history.)
        contents = [m["content"] for m in server.last_json()["messages"] if m["role"] != "system"]
        mem.close()
    assert contents == [
        "I live in Tokyo",
        "You said: I live in Tokyo",
        "I like tea",
        "You said: I like tea",
        "where do I live?",
    ]


def test_sessions_history_and_stats(filled):
    sessions = run("sessions", "--store", filled)
    assert "s1" in sessions and "alice" in sessions and "s2" in sessions
    history = run("history", "s1", "--store", filled)
    assert history.index("I live in Tokyo") < history.index("I like tea")
    assert "bob here" not in history
    stats = run("stats", "--store", filled)
    assert "exchanges" in stats and " 3" in stats


def test_store_from_the_environment(filled):
    assert "s1" in run("sessions", env={"MEMTAP_STORE": filled})


def test_facts_recall_and_forget(filled):
    assert "Alice lives in Tokyo" in run("facts", "--entity", "alice", "--store", filled)
    recalled = run("recall", "where does alice live", "--entity", "alice", "--store", filled)
    assert "Alice lives in Tokyo" in recalled
    # Its two exchanges, the fact remembered, and both sides of each exchange kept as
    # episodes ("I live in Tokyo", "I like tea": short, but they say something).
    assert "deleted 7 record(s)" in run("forget", "--entity", "alice", "--yes", "--store", filled)
    forgotten = CliRunner().invoke(main, ["history", "s1", "--store", filled])
    assert forgotten.exit_code == 1 and "no session 's1'" in forgotten.output
    assert "I live in Tokyo" not in forgotten.output
    assert "bob here" in run("history", "s2", "--store", filled)


def test_api_key_is_not_in_the_duckdb_file(filled, tmp_path):
    raw = (tmp_path / "cli.duckdb").read_bytes()
    assert b"sk-cli-test-key" not in raw


def test_plugins_json_lists_distributions_and_hooks():
    listed = {p["name"]: p for p in json.loads(run("plugins", "--json"))}
    assert listed["openai"]["distribution"] == "memtap-openai"
    assert "memtap_match_client" in listed["openai"]["hooks"]
    assert listed["duckdb"]["distribution"] == "memtap-duckdb"
    assert "memtap_open_store" in listed["duckdb"]["hooks"]
    assert listed["redact"]["distribution"] == "memtap-core"


def test_unknown_store_scheme_is_a_clean_cli_error():
    result = CliRunner().invoke(main, ["stats", "--store", "nosuch://x"])
    assert result.exit_code != 0
    assert "no installed memtap storage plugin accepts 'nosuch'" in result.output


def test_proxy_without_memtap_proxy_says_what_to_install(tmp_path):
    # In a process of its own: the command line loads its plugins once per process.
    env = {"MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_DISABLE_PLUGINS": "proxy", "PATH": ""}
    for args in (["proxy"], ["proxy", "--port", "8080", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "memtap.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert NEEDS_PROXY in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "memtap.cli", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "\n  proxy " in done.stdout, done.stdout


def test_demo_shows_memory_carried_from_run_one_to_run_two(tmp_path):
    env = {"MEMTAP_HOME": str(tmp_path / "home"), "COLUMNS": "200", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-m", "memtap.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "memtap history" in out
    assert "memtap injected 4 earlier message(s)" in out
    assert "I adopted a beagle called Mochi last week." in out
    # Run 3: a new session gets what alice said in session 1 as a recalled memory block.
    assert "Run 3: a new session" in out
    assert "the user said: I adopted a beagle called Mochi last week." in out
    assert "the user said: Hi! I'm Alice and I live in Tokyo." in out
    assert "memtap injected 1 memory block(s) recalled from an earlier session." in out
    # One default store: the demo wrote where every command looks without --store.
    assert sorted(p.name for p in (tmp_path / "home").glob("*.duckdb")) == ["memtap.duckdb"]
    session = re.search(r"memtap history (demo-[\d-]+)", out).group(1)
    for args, shown in (
        (["sessions"], "alice"),
        (["history", session], "I adopted a beagle called Mochi last week."),
        (["recall", "beagle", "--entity", "alice"], "Mochi"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "memtap.cli", *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert shown in done.stdout, (args, done.stdout)


def test_forget_without_yes_refuses_when_it_cannot_ask(filled):
    # CliRunner's stdin is not a terminal: the command cannot ask, so it must not delete.
    result = CliRunner().invoke(main, ["forget", "--entity", "alice", "--store", filled], input="y\n")
    assert result.exit_code == 1
    assert "pass --yes" in result.output and "cannot ask" in result.output
    assert "alice" in run("sessions", "--store", filled)
    with memtap.Memory(filled) as mem:
        assert mem.facts(entity_id="alice")
    assert "deleted" in run("forget", "--entity", "alice", "--yes", "--store", filled)
    assert "alice" not in run("sessions", "--store", filled)


def test_demo_reruns_do_not_pile_up_memories(tmp_path):
    """Re-running the demo in the same home stores each thing alice said once: by the third
    run the memory block repeats no sentence and the recall table shows what it holds."""
    env = {"MEMTAP_HOME": str(tmp_path / "home"), "COLUMNS": "200", "PATH": ""}
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-m", "memtap.cli", "demo"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    run_3 = done.stdout.split("Run 3:", 1)[1]
    # What alice said and what the model answered her (answers are episodes too).
    said = [
        line.split(" said: ", 1)[1].strip(" │")
        for line in run_3.splitlines()
        if "the user said: " in line or "you (the assistant) said: " in line
    ]
    # A relative time in a line is followed by what it meant when it was said.
    noted = [
        text for text in said if re.search(r" \(last week = \d{4}-\d\d-\d\d\.\.\d{4}-\d\d-\d\d\)$", text)
    ]
    assert [text.split(" (", 1)[0] for text in noted] == ["I adopted a beagle called Mochi last week."]
    block = [text.split(" (last week = ", 1)[0] for text in said]
    known = {
        "Congratulations! Mochi is a lovely name for a beagle.",
        "Hi! I'm Alice and I live in Tokyo.",
        "I adopted a beagle called Mochi last week.",
        "Nice to meet you, Alice! Tokyo is a wonderful city.",
        "Take Mochi to Yoyogi Park in Tokyo: beagles love it.",
        "You live in Tokyo, and your beagle is called Mochi.",
    }
    # Each thing said is in the block once at most (how many rank above the injection gate
    # is the ranking's business), and what alice said about herself is there.
    assert len(block) == len(set(block)) and set(block) <= known
    assert {"Hi! I'm Alice and I live in Tokyo.", "I adopted a beagle called Mochi last week."} <= set(block)
    table = [
        line.split("│")[3].strip() for line in run_3.split("user:", 1)[0].splitlines() if "│ episode" in line
    ]
    assert len(table) == len(set(table)) and set(block) <= set(table) <= known
    with memtap.Memory(f"duckdb:///{tmp_path / 'home' / 'memtap.duckdb'}", spool=False) as mem:
        assert len(mem.facts(entity_id="alice")) == 6


def test_commands_that_do_not_recall_start_without_the_embedder(tmp_path, monkeypatch):
    """Listing, showing or deleting what is stored makes no embedder (its model and numpy:
    ~0.1 s of the command); ``memtap recall`` does."""
    monkeypatch.setenv("MEMTAP_HOME", str(tmp_path / "home"))
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    with memtap.Memory(url, spool=False, embedder=False) as mem:
        mem.remember("I adopted a beagle called Mochi.", entity_id="alice")
    model = ["memtap_minilm.embedder", "numpy"]
    for args in (["facts", "--entity", "alice"], ["entities"], ["stats"], ["sessions"]):
        assert imported_by_the_command_line(model, args=[*args, "--store", url]) == [], args
    recall = ["recall", "beagle", "--entity", "alice", "--store", url]
    assert imported_by_the_command_line(model, args=recall) == model
