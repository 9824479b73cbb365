"""Codex CLI (``codex exec``) through the memtap proxy, as its custom model provider, with no
``x-memtap-*`` headers."""

from __future__ import annotations

import json
from typing import Any

from agents_support import MEMORY, Codex, assert_no_scaffolding, codex_session, memory_blocks
from proxy_support import settle

import memtap
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec

#: What Codex wraps around its user's words; never in a stored fact.
SCAFFOLDING = ("<environment_context", "AGENTS.md", "<INSTRUCTIONS>", "<skills_instructions")


def responses_requests(upstream: ScriptedModelServer) -> list[dict[str, Any]]:
    """The bodies of the model calls the upstream got, in order."""
    return [r.json for r in upstream.requests if r.method == "POST" and r.path == "/v1/responses"]


def item_key(item: dict[str, Any]) -> str:
    """One input item as a comparable text (memtap's memory blocks cut out)."""
    kind = item.get("type", "message")
    if kind == "message":
        content = item["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", p["type"]) for p in content]
        return f"{item['role']}: " + MEMORY.sub("", "\n".join(parts)).strip()
    if kind in ("function_call", "function_call_output"):
        return f"{kind} {item['call_id']}"
    return f"{kind} {item.get('id', '')}"


def user_prompts(body: dict[str, Any]) -> list[str]:
    """The user's own prompts in a request (Codex's contextual user messages left out)."""
    keys = [item_key(i) for i in body["input"]]
    return [k for k in keys if k.startswith("user: ") and not k.startswith(("user: <", "user: # AGENTS.md"))]


def test_fresh_exec_sessions_are_separate_and_a_later_one_recalls(
    codex: Codex, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    upstream.script(Reply(text="Noted: teal.", thinking="The user shares a preference."))
    first = codex_session(codex.exec("My favourite colour is teal, and my dog is called Biscuit.").check())
    upstream.script(Reply(text="Paris."))
    second = codex_session(codex.exec("What is the capital of France?").check())
    assert first != second

    body = responses_requests(upstream)[-1]
    assert user_prompts(body) == ["user: What is the capital of France?"]
    assert "teal" not in "\n".join(item_key(i) for i in body["input"])

    settle(mem, len(responses_requests(upstream)))
    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(Reply(text="Teal."))
    third = codex_session(codex.exec("What is my favourite colour?").check())
    body = responses_requests(upstream)[-1]
    assert "teal" in memory_blocks(body)
    assert "teal" not in "\n".join(item_key(i) for i in body["input"])
    # memory never goes ahead of Codex's own developer items
    roles = [i.get("role") for i in body["input"]]
    assert roles[:2] == ["developer", "developer"]
    assert "instructions" not in body

    settle(mem, len(responses_requests(upstream)))
    assert {s.session_id for s in mem.sessions(entity_id="default")} == {first, second, third}
    assert [m.content for m in mem.history(first)] == [
        "My favourite colour is teal, and my dog is called Biscuit.",
        "Noted: teal.",
    ]
    assert_no_scaffolding(mem, SCAFFOLDING)


def test_exec_resume_carries_every_turn_once(
    codex: Codex, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    shell = ToolCallSpec("exec_command", json.dumps({"cmd": "cat notes.txt"}), id="call_cat_notes")
    upstream.script(
        Reply(thinking="Read the file.", tool_calls=[shell]),
        Reply(text="It says the deploy key rotates on Fridays."),
    )
    session = codex_session(codex.exec("Read notes.txt and tell me what it says.").check())
    first_requests = len(responses_requests(upstream))
    assert first_requests == 2  # the function call, then its output
    upstream.script(Reply(text="You asked me to read notes.txt."))
    resumed = codex_session(codex.exec("resume", "--last", "What did I ask you first?").check())
    assert resumed == session

    for body in responses_requests(upstream)[1:]:
        keys = [item_key(i) for i in body["input"]]
        assert len(keys) == len(set(keys)), keys  # no item twice
    last = responses_requests(upstream)[-1]
    assert user_prompts(last) == [
        "user: Read notes.txt and tell me what it says.",
        "user: What did I ask you first?",
    ]
    assert "Read notes.txt" not in memory_blocks(last)

    settle(mem, len(responses_requests(upstream)))
    users = [m.content for m in mem.history(session) if m.role == "user"]
    assert users == ["Read notes.txt and tell me what it says.", "What did I ask you first?"]
    assert_no_scaffolding(mem, SCAFFOLDING)


def test_mem_status_is_answered_by_the_proxy(codex: Codex, upstream: ScriptedModelServer) -> None:
    run = codex.exec("mem:status").check()
    assert "memtap proxy: store duckdb:" in run.stdout
    assert "agent profile codex" in run.stdout
    assert f"session '{codex_session(run)}' (named by the agent)" in run.stdout
    assert responses_requests(upstream) == []
