"""Claude Code (``claude -p``) through the memtap proxy, with no ``x-memtap-*`` headers.

Each test runs the real agent against the proxy in front of the scripted upstream and
asserts on what went over the wire and what was stored.
"""

from __future__ import annotations

import json
from typing import Any

from agents_support import MEMORY, ClaudeCode, assert_no_scaffolding, memory_blocks, result_of
from proxy_support import settle

import memtap
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec

#: What Claude Code wraps around its user's words; never in a stored fact.
SCAFFOLDING = ("<system-reminder", "claudeMd", "gitStatus", "Available agent types", "# Environment")


def messages_requests(upstream: ScriptedModelServer) -> list[dict[str, Any]]:
    """The bodies of the model calls the upstream got, in order."""
    return [r.json for r in upstream.requests if r.method == "POST" and r.path == "/v1/messages"]


def turns(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The conversation as (role, text) per content block, memtap's memory blocks cut out;
    thinking, tool uses and tool results named by their ids."""
    out: list[tuple[str, str]] = []
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            kind = block["type"]
            if kind == "text":
                text = MEMORY.sub("", block["text"]).strip()
                if text:
                    out.append((message["role"], text))
            elif kind == "tool_use":
                out.append((message["role"], f"tool_use {block['id']}"))
            elif kind == "tool_result":
                out.append((message["role"], f"tool_result {block['tool_use_id']}"))
            elif kind == "thinking":
                out.append((message["role"], f"thinking {block['signature']}"))
            else:
                out.append((message["role"], kind))
    return out


def said(body: dict[str, Any]) -> str:
    """Everything in the conversation outside memtap's memory blocks, as one text."""
    return "\n".join(text for _, text in turns(body))


def test_fresh_sessions_are_separate_and_a_later_one_recalls(
    claude: ClaudeCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    upstream.script(Reply(text="Noted: teal, and Biscuit.", thinking="The user shares two facts."))
    first = result_of(claude.prompt("My favourite colour is teal, and my dog is called Biscuit."))
    upstream.script(Reply(text="Paris."))
    second = result_of(claude.prompt("What is the capital of France?"))

    assert first["session_id"] != second["session_id"]
    body = messages_requests(upstream)[-1]
    assert "teal" not in said(body) and "Biscuit" not in said(body)  # no turn of the first
    assert [m["role"] for m in body["messages"]] == ["user", "system"]  # its own prompt only

    settle(mem, len(messages_requests(upstream)))
    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(Reply(text="Teal."))
    third = result_of(claude.prompt("What is my favourite colour?"))
    body = messages_requests(upstream)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    assert "teal" not in said(body)  # and never as a turn of this one
    assert third["result"] == "Teal."

    settle(mem, len(messages_requests(upstream)))
    sessions = {s.session_id for s in mem.sessions(entity_id="default")}
    assert sessions == {first["session_id"], second["session_id"], third["session_id"]}
    for result in (first, second, third):
        history = mem.history(str(result["session_id"]))
        assert [m.role for m in history] == ["user", "assistant"]
    assert mem.history(str(first["session_id"]))[0].content == (
        "My favourite colour is teal, and my dog is called Biscuit."
    )
    assert_no_scaffolding(mem, SCAFFOLDING)
    facts = [f.text for f in mem.facts(entity_id="default")]
    assert "My favourite colour is teal, and my dog is called Biscuit." in facts


def test_continue_and_resume_carry_every_turn_once(
    claude: ClaudeCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    notes = claude.workdir / "notes.txt"
    read = ToolCallSpec("Read", json.dumps({"file_path": str(notes)}), id="toolu_01ReadNotes")
    upstream.script(
        Reply(thinking="I should read the file first.", tool_calls=[read]),
        Reply(text="It says the deploy key rotates on Fridays.", thinking="The file answers it."),
    )
    first = result_of(claude.prompt("Read notes.txt and tell me what it says."))
    session = str(first["session_id"])
    requests = messages_requests(upstream)
    assert len(requests) == 2  # the tool_use turn, then its tool_result
    assert ("user", "tool_result toolu_01ReadNotes") in turns(requests[1])

    upstream.script(Reply(text="You asked me to read notes.txt."))
    again = result_of(claude.prompt("--continue", "What did I ask you first?"))
    upstream.script(Reply(text="Fridays."))
    resumed = result_of(claude.prompt("--resume", session, "When does the key rotate?"))
    assert again["session_id"] == resumed["session_id"] == session

    for body in messages_requests(upstream)[2:]:
        conversation = turns(body)
        assert len(conversation) == len(set(conversation)), conversation  # no turn twice
        assert memory_blocks(body).count("Read notes.txt") == 0  # nor again as memory
    last = turns(messages_requests(upstream)[-1])
    prompts = [
        t for t in last if t[0] == "user" and not t[1].startswith(("tool_result", "<system-reminder>"))
    ]
    assert prompts == [
        ("user", "Read notes.txt and tell me what it says."),
        ("user", "What did I ask you first?"),
        ("user", "When does the key rotate?"),
    ]

    settle(mem, len(messages_requests(upstream)))
    stored = [(m.role, m.content) for m in mem.history(session)]
    users = [text for role, text in stored if role == "user"]
    assert users == [
        "Read notes.txt and tell me what it says.",
        "What did I ask you first?",
        "When does the key rotate?",
    ]
    assert stored.count(("assistant", "It says the deploy key rotates on Fridays.")) == 1
    assert_no_scaffolding(mem, SCAFFOLDING)


def test_mem_status_is_answered_by_the_proxy(claude: ClaudeCode, upstream: ScriptedModelServer) -> None:
    result = result_of(claude.prompt("mem:status"))
    assert str(result["result"]).startswith("memtap proxy: store duckdb:")
    assert "agent profile claude-code" in str(result["result"])
    assert f"session '{result['session_id']}' (named by the agent)" in str(result["result"])
    assert messages_requests(upstream) == []  # the model never saw it


def test_a_session_named_by_header_spans_runs_with_history(
    claude: ClaudeCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    named = {"ANTHROPIC_CUSTOM_HEADERS": "x-memtap-session: project-x"}  # as docs/proxy.md says
    upstream.script(Reply(text="Noted: Fridays."), Reply(text="On Fridays."))
    first = result_of(claude.prompt("We deploy on Fridays.", **named))
    second = result_of(claude.prompt("When do we deploy?", **named))
    assert first["session_id"] != second["session_id"]  # two Claude Code sessions...
    body = messages_requests(upstream)[-1]
    assert turns(body)[:2] == [
        ("user", "We deploy on Fridays."),
        ("assistant", "Noted: Fridays."),
    ]  # ...one memtap session
    assert "x-memtap-session" not in upstream.requests[-1].headers
    settle(mem, len(messages_requests(upstream)))
    assert [m.content for m in mem.history("project-x")] == [
        "We deploy on Fridays.",
        "Noted: Fridays.",
        "When do we deploy?",
        "On Fridays.",
    ]


def test_the_same_prompt_in_fresh_sessions_is_remembered_once(
    claude: ClaudeCode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    prompt = "Remember that the staging database is called heron."
    runs = []
    for _ in range(3):
        upstream.script(Reply(text="Noted: heron."))
        runs.append(result_of(claude.prompt(prompt)))
    assert len({r["session_id"] for r in runs}) == 3

    settle(mem, len(messages_requests(upstream)))
    assert {s.session_id for s in mem.sessions(entity_id="default")} == {r["session_id"] for r in runs}
    facts = [f.text for f in mem.facts(entity_id="default")]
    assert facts.count(prompt) == 1, facts  # three identical episodes, one fact
    assert len(facts) == len(set(facts)), facts
    assert_no_scaffolding(mem, SCAFFOLDING)
