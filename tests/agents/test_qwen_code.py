"""Qwen Code (``qwen -p``) through the memtap proxy, with no ``x-memtap-*`` headers: its
session from its own traffic, its reminders and memory extraction never stored."""

from __future__ import annotations

import json

from agents_support import (
    ASKED,
    FOLLOW_UP,
    NOTES_ANSWER,
    NOTES_CALL_ID,
    READ_NOTES,
    TOLD,
    QwenCode,
    assert_notes_loop_stored,
    assert_nothing_stored_holds,
    assert_sessions_apart,
    assert_status_answered,
    chat_requests,
    memory_blocks,
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
    upstream.script(Reply(text="Noted: teal, and Biscuit."))
    qwen.prompt(TOLD).check()
    upstream.script(Reply(text="Paris."))
    qwen.prompt(ASKED).check()
    upstream.script(Reply(text="About France."))
    qwen.prompt(FOLLOW_UP, "--continue").check()  # the latest session: France

    settle(mem, len(chat_requests(upstream, QWEN_CODE)))
    assert_sessions_apart(mem)

    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(Reply(text="Teal."))
    qwen.prompt("What is my favourite colour?").check()
    body = chat_requests(upstream, QWEN_CODE)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    assert_nothing_stored_holds(mem, SCAFFOLDING)


def test_mem_status_is_answered_by_the_proxy(qwen: QwenCode, upstream: ScriptedModelServer) -> None:
    assert_status_answered(qwen.prompt("mem:status").check(), upstream, QWEN_CODE)


def test_a_tool_loop_completes_with_valid_stored_history(
    qwen: QwenCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    notes = qwen.workdir / "notes.txt"
    read = ToolCallSpec("read_file", json.dumps({"file_path": str(notes)}), id=NOTES_CALL_ID)
    upstream.script(Reply(tool_calls=[read]), Reply(text=NOTES_ANSWER))
    run = qwen.prompt(READ_NOTES).check()
    assert_notes_loop_stored(run, upstream, QWEN_CODE, mem)
