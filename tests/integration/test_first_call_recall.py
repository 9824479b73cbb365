"""A new process's first call recalls: the entity's index is loaded in the background from
the first scope (or register) and the call waits a bounded time for it; a call that got no
recall says why in a debug log line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memtap
from memtap.testing.server import ScriptedModelServer

APP = (
    "import logging, sys, openai, memtap\n"
    "logging.basicConfig(stream=sys.stderr, format='%(name)s %(levelname)s %(message)s')\n"
    "logging.getLogger('memtap').setLevel(logging.DEBUG)\n"
    # The shared test machine runs at a load of ~25 on 2 cores, where a new process's first
    # DuckDB read takes 0.3-0.4 s: the test is about the wait, not about the disk's speed.
    "import memtap.longterm.recall as recall; recall.COLD_INDEX_WAIT = 30.0\n"
    "mem = memtap.Memory(sys.argv[1])\n"
    "client = mem.register(openai.OpenAI(base_url=sys.argv[2], api_key='sk-first-call-00000000000'))\n"
    "with mem.scope(entity_id=sys.argv[3], session_id='a-new-session'):\n"
    "    client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': sys.argv[4]}])\n"
    "mem.close()\n"
)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"duckdb:///{tmp_path / 'app.duckdb'}"
    with memtap.Memory(url, embedder=False, spool=False) as mem:
        mem.remember("Alice's dog is called Mochi", entity_id="alice")
        mem.remember("Alice lives in Tokyo", entity_id="alice")
    return url


def first_call(tmp_path: Path, store_url: str, entity: str, question: str) -> tuple[list[dict], str]:
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
    env.pop("MEMTAP_STORE", None)
    with ScriptedModelServer() as server:
        done = subprocess.run(
            [sys.executable, "-c", APP, store_url, server.openai_base_url, entity, question],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return server.last_json()["messages"], done.stderr


@pytest.mark.parametrize(
    ("question", "fact"),
    [("What is my dog called?", "Mochi"), ("Which city do I live in, Tokyo or Osaka?", "Tokyo")],
)
def test_a_new_processs_first_call_gets_the_fact_stored_earlier(tmp_path, store_url, question, fact):
    sent, _ = first_call(tmp_path, store_url, "alice", question)
    system = [m["content"] for m in sent if m["role"] == "system"]
    assert len(system) == 1 and fact in system[0], sent
    assert sent[-1] == {"role": "user", "content": question}


def test_a_call_without_recall_says_why_in_a_debug_line(tmp_path, store_url):
    sent, log = first_call(tmp_path, store_url, "nobody", "What is my dog called?")
    assert [m["role"] for m in sent] == ["user"]
    lines = [line for line in log.splitlines() if "no recalled facts" in line]
    assert len(lines) == 1 and "DEBUG" in lines[0] and "'nobody'" in lines[0], log
    assert "no stored fact" in lines[0], lines[0]
