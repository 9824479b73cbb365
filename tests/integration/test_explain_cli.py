"""`memtap explain` on a DuckDB file filled through the real openai SDK against the local
scripted server: a session's calls with their ids, one call's injected history and
recalled facts (table and JSON, with scores and score parts), a clear error for an
unknown id."""

from __future__ import annotations

import json
import time

import openai
import pytest
from click.testing import CliRunner

import memtap
from memtap.cli.main import main
from memtap.formats.blocks import OPEN_TAG
from memtap.longterm.recall_injector import RecallBudget
from memtap.testing.server import ScriptedModelServer


@pytest.fixture
def filled(tmp_path):
    """A store with two calls in session s1 (the second: history + recalled facts)."""
    url = f"duckdb:///{tmp_path / 'explain.duckdb'}"
    with ScriptedModelServer() as server:
        mem = memtap.Memory(url, recall=RecallBudget(k=1), episodes=False)
        client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-cli-test-key-000000000000")
        )
        tokyo = mem.remember("Alice lives in Tokyo", entity_id="alice")
        tea = mem.remember("Alice likes green tea", entity_id="alice")
        mem.recall("tokyo", entity_id="alice")  # the index is warm: the next call recalls
        with mem.scope(entity_id="alice", session_id="s1"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])
            for _ in range(50):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Is Alice in Tokyo, with tea?"}]
                )
                system = [m for m in server.last_json()["messages"] if m["role"] == "system"]
                if system and OPEN_TAG in system[0]["content"]:
                    break
                time.sleep(0.02)
        mem.flush()
        ids = [ex.id for ex in mem.exchanges(session_id="s1")]
        mem.close()
    return url, ids, tokyo.id, tea.id


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_explain_json_names_facts_scores_parts_and_turns(filled):
    url, ids, tokyo_id, tea_id = filled
    result = run("explain", ids[-1], "--json", "--store", url)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["exchange"]["id"] == ids[-1]
    history, recall = data["blocks"]
    assert history["kind"] == "history"
    assert history["turns"][:2] == [
        {"role": "user", "content": "Hello!", "exchange_id": ids[0]},
        {"role": "assistant", "content": history["turns"][1]["content"], "exchange_id": ids[0]},
    ]
    assert recall["kind"] == "recall"
    (fact,) = recall["facts"]  # k=1
    assert fact["fact_id"] in {tokyo_id, tea_id} and fact["text"] in recall["text"]
    assert isinstance(fact["score"], float) and 0 < fact["score"] <= 1
    assert set(fact["parts"]) >= {"words", "recency", "bm25"}
    (other,) = [f for f in recall["left_out"] if f["fact_id"] in {tokyo_id, tea_id}]
    assert other["reason"] == "limit" and other["fact_id"] != fact["fact_id"]


def test_explain_shows_a_call_and_lists_a_session(filled):
    url, ids, tokyo_id, _ = filled
    listed = CliRunner().invoke(main, ["explain", "--session", "s1", "--store", url], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert all(i in listed.output for i in ids)
    assert "nothing" in listed.output and "1 fact" in listed.output
    shown = CliRunner().invoke(main, ["explain", ids[-1], "--store", url], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    for expected in ("history", "recall", "injected facts", "considered, left out", "limit", "Hello!"):
        assert expected in shown.output
    assert tokyo_id in shown.output


def test_an_unknown_id_is_a_clear_error(filled):
    url, *_ = filled
    result = CliRunner().invoke(main, ["explain", "no-such-id", "--store", url])
    assert result.exit_code == 1
    assert "no captured call with id 'no-such-id'" in result.output
    assert "--session" in result.output
    usage = CliRunner().invoke(main, ["explain", "--store", url])
    assert usage.exit_code == 2 and "EXCHANGE_ID" in usage.output


def test_last_explains_a_sessions_latest_call(filled):
    url, ids, *_ = filled
    latest = run("explain", "--session", "s1", "--last", "--json", "--store", url)
    assert latest.exit_code == 0, latest.output
    assert json.loads(latest.output)["exchange"]["id"] == ids[-1]
    none = CliRunner().invoke(main, ["explain", "--session", "nope", "--last", "--store", url])
    assert none.exit_code == 1 and "no captured call in session 'nope'" in none.output
    alone = CliRunner().invoke(main, ["explain", ids[-1], "--last", "--store", url])
    assert alone.exit_code == 2 and "--last goes with --session" in alone.output
