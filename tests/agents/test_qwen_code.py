"""Qwen Code (``qwen -p``) through the memtap proxy, with no ``x-memtap-*`` headers: its
session from its own traffic, its reminders and memory extraction never stored."""

from __future__ import annotations

import json

from agents_support import (
    QwenCode,
    assert_no_scaffolding,
    chat_requests,
    memory_blocks,
    only_session_with,
    typed_turns,
)
from proxy_support import settle

import memtap
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec
from memtap_agents import QWEN_CODE

#: What Qwen Code wraps around its user's words, and its side calls; never stored.
SCAFFOLDING = ("<system-reminder", "setting up the context", "Managed memory", "memory extraction")


def test_sessions_apart_continue_in_one_and_a_later_one_recalls(
    qwen: QwenCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    told = "My favourite colour is teal, and my dog is called Biscuit."
    upstream.script(Reply(text="Noted: teal, and Biscuit."))
    qwen.prompt(told).check()
    upstream.script(Reply(text="Paris."))
    qwen.prompt("What is the capital of France?").check()
    upstream.script(Reply(text="About France."))
    qwen.prompt("What did I ask you?", "--continue").check()  # the latest session: France

    settle(mem, len(chat_requests(upstream, QWEN_CODE)))
    first = only_session_with(mem, told)
    second = only_session_with(mem, "What is the capital of France?")
    assert first != second
    assert typed_turns(mem, first) == [told]
    assert typed_turns(mem, second) == ["What is the capital of France?", "What did I ask you?"]

    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(Reply(text="Teal."))
    qwen.prompt("What is my favourite colour?").check()
    body = chat_requests(upstream, QWEN_CODE)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    assert_no_scaffolding(mem, SCAFFOLDING)
    for s in mem.sessions(entity_id="default"):
        for m in mem.history(s.session_id):
            assert not any(marker in m.content for marker in SCAFFOLDING), m.content


def test_mem_status_is_answered_by_the_proxy(qwen: QwenCode, upstream: ScriptedModelServer) -> None:
    run = qwen.prompt("mem:status").check()
    assert "memtap proxy: store duckdb:" in run.stdout
    assert "agent profile qwen-code" in run.stdout
    assert chat_requests(upstream, QWEN_CODE) == []  # the model never saw it


def test_a_tool_loop_completes_with_valid_stored_history(
    qwen: QwenCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    notes = qwen.workdir / "notes.txt"
    read = ToolCallSpec("read_file", json.dumps({"file_path": str(notes)}), id="call_read_notes")
    upstream.script(Reply(tool_calls=[read]), Reply(text="It says the deploy key rotates on Fridays."))
    run = qwen.prompt("Read notes.txt and tell me what it says.").check()
    assert "Fridays" in run.stdout
    requests = chat_requests(upstream, QWEN_CODE)
    assert len(requests) == 2
    result = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert result and result[0]["tool_call_id"] == "call_read_notes"
    assert "rotates on Fridays" in json.dumps(result[0]["content"])

    settle(mem, 2)
    session = only_session_with(mem, "Read notes.txt and tell me what it says.")
    history = mem.history(session)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls[0].id == "call_read_notes"
    assert history[2].tool_call_id == "call_read_notes"
    assert history[3].content == "It says the deploy key rotates on Fridays."
