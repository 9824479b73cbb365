"""Gemini CLI (``gemini -p``) through the memtap proxy (``GOOGLE_GEMINI_BASE_URL``), with no
``x-memtap-*`` headers: Gemini's own wire protocol, its model router's side call, a tool
loop, ``--resume``, recall across sessions and ``mem:`` commands."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agents_support import MEMORY, GeminiCli, assert_no_scaffolding, gemini_result, memory_blocks
from proxy_support import settle

import memtap
from memtap.testing.server import RecordedRequest, Reply, ScriptedModelServer, ToolCallSpec

#: What Gemini CLI wraps around its user's words; never in a stored message or fact.
SCAFFOLDING = ("<session_context", "This is the Gemini CLI", "GEMINI.md", "<loaded_context")
#: The model router's answer (a side call asking for JSON, made when no model is named).
ROUTED = Reply(text='{"complexity_reasoning": "Simple.", "complexity_score": 10}')


def turns(upstream: ScriptedModelServer) -> list[RecordedRequest]:
    """The conversation's model calls (Gemini CLI streams them), in order."""
    return [r for r in upstream.requests if r.method == "POST" and r.path.endswith(":streamGenerateContent")]


def side_calls(upstream: ScriptedModelServer) -> list[RecordedRequest]:
    """Gemini CLI's own calls besides the conversation (the model router...)."""
    return [r for r in upstream.requests if r.method == "POST" and r.path.endswith(":generateContent")]


def content_keys(body: dict[str, Any]) -> list[str]:
    """Each Content as a comparable text (memtap's memory blocks cut out)."""
    keys = []
    for content in body["contents"]:
        for part in content["parts"]:
            if "text" in part:
                keys.append(f"{content['role']}: " + MEMORY.sub("", part["text"]).strip()[:60])
            elif "functionCall" in part:
                keys.append(f"{content['role']}: call {part['functionCall']['name']}")
            elif "functionResponse" in part:
                keys.append(f"{content['role']}: response {part['functionResponse']['name']}")
    return keys


def typed(body: dict[str, Any]) -> list[str]:
    """The user's own prompts in a request (Gemini CLI's context parts left out)."""
    return [
        part["text"]
        for content in body["contents"]
        if content["role"] == "user"
        for part in content["parts"]
        if "text" in part and not part["text"].startswith("<session_context>")
    ]


def test_a_turn_through_the_proxy_is_the_agents_bytes_when_nothing_is_injected(
    gemini: GeminiCli, workdir: Path, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    # The same prompt straight to the upstream: the agent's own bytes.
    direct = GeminiCli(gemini.binary, gemini.home, workdir, upstream.base_url)
    upstream.script(Reply(text="Four."))
    gemini_result(direct.prompt("What is 2 + 2?"))
    expected = turns(upstream)[-1]
    upstream.clear()
    upstream.script(Reply(text="Four."))
    result = gemini_result(gemini.prompt("What is 2 + 2?"))
    assert result["response"] == "Four."
    sent = turns(upstream)[-1]
    assert (
        (sent.path, sent.query)
        == (expected.path, expected.query)
        == (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            "alt=sse",
        )
    )
    # memtap had nothing to add: the agent's own bytes. Gemini CLI's own request can differ
    # from one run to the next (a CI rehearsal saw its system instruction differ at byte
    # 10,308), so up to two more direct runs are compared too; a body memtap changed
    # matches none of them.
    direct_bodies = [expected.body]
    while sent.body not in direct_bodies and len(direct_bodies) < 3:
        upstream.script(Reply(text="Four."))
        gemini_result(direct.prompt("What is 2 + 2?"))
        direct_bodies.append(turns(upstream)[-1].body)
    assert sent.body in direct_bodies, [len(b) for b in direct_bodies]
    assert sent.headers["x-goog-api-key"] == "gemini-test-dummy-key"
    settle(mem, 1)
    [session] = mem.sessions(entity_id="default")
    assert [(m.role, m.content) for m in mem.history(session.session_id)] == [
        ("user", "What is 2 + 2?"),
        ("assistant", "Four."),
    ]


def test_fresh_sessions_are_separate_and_a_later_one_recalls(
    gemini: GeminiCli, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    upstream.script(Reply(text="Noted: teal."))
    gemini_result(gemini.prompt("My favourite colour is teal, and my dog is called Biscuit."))
    upstream.script(Reply(text="Paris."))
    gemini_result(gemini.prompt("What is the capital of France?"))
    body = turns(upstream)[-1].json
    assert typed(body) == ["What is the capital of France?"]
    assert "teal" not in json.dumps(body["contents"])  # another session's words are not history

    settle(mem, len(turns(upstream)))
    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    time.sleep(1)  # the check: recalled in a fresh session 1 s later
    upstream.script(Reply(text="Teal."))
    assert gemini_result(gemini.prompt("What is my favourite colour?"))["response"] == "Teal."
    body = turns(upstream)[-1].json
    assert "teal" in memory_blocks(body)
    assert "teal" not in json.dumps(body["contents"])
    system = body["systemInstruction"]["parts"][0]["text"]
    # memory goes into Gemini CLI's own prompt, after its last section's heading
    assert system.index("# Final Reminder") < system.index("<memtap-memory>")
    assert system.startswith("You are ")

    settle(mem, len(turns(upstream)))
    sessions = mem.sessions(entity_id="default")
    assert len(sessions) == 3
    stored = sorted(m.content for s in sessions for m in mem.history(s.session_id) if m.role == "user")
    assert stored == sorted(
        [
            "My favourite colour is teal, and my dog is called Biscuit.",
            "What is the capital of France?",
            "What is my favourite colour?",
        ]
    )
    assert_no_scaffolding(mem, SCAFFOLDING)
    for s in sessions:
        assert not any(marker in m.content for m in mem.history(s.session_id) for marker in SCAFFOLDING)


def test_a_tool_loop_then_resume_carries_every_turn_once(
    gemini: GeminiCli, upstream: ScriptedModelServer, mem: memtap.Memory, workdir: Path
) -> None:
    read = ToolCallSpec("read_file", json.dumps({"file_path": str(workdir / "notes.txt")}))
    upstream.script(Reply(tool_calls=[read]), Reply(text="It says the deploy key rotates on Fridays."))
    first = gemini_result(gemini.prompt("Read notes.txt and tell me what it says."))
    assert first["response"] == "It says the deploy key rotates on Fridays."
    assert len(turns(upstream)) == 2  # the function call, then its response
    answered = turns(upstream)[1].json["contents"][-1]["parts"][0]["functionResponse"]
    assert answered["response"] == {"output": "The deploy key rotates on Fridays.\n"}

    upstream.script(Reply(text="You asked me to read notes.txt."))
    resumed = gemini_result(gemini.prompt("What did I ask you first?", "--resume", "latest"))
    assert resumed["session_id"] == first["session_id"]
    last = turns(upstream)[-1].json
    assert typed(last) == ["Read notes.txt and tell me what it says.", "What did I ask you first?"]
    assert "Read notes.txt" not in memory_blocks(last)  # Gemini CLI resends it: not injected again

    settle(mem, len(turns(upstream)))
    [session] = mem.sessions(entity_id="default")
    stored = mem.history(session.session_id)
    assert [(m.role, m.content[:30]) for m in stored] == [
        ("user", "Read notes.txt and tell me wha"),
        ("assistant", ""),
        ("tool", '{"output": "The deploy key rot'),
        ("assistant", "It says the deploy key rotates"),
        ("user", "What did I ask you first?"),
        ("assistant", "You asked me to read notes.txt"),
    ]
    # a valid history: the call and its response pair up
    assert stored[1].tool_calls[0].name == "read_file"
    assert stored[2].tool_call_id == stored[1].tool_calls[0].id
    assert_no_scaffolding(mem, SCAFFOLDING)


def test_the_model_routers_side_call_is_neither_injected_nor_stored(
    gemini: GeminiCli, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    mem.remember("The user's favourite colour is teal.", entity_id="default")
    assert mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(ROUTED, Reply(text="Hello."))
    assert (
        gemini_result(gemini.prompt("Say hello about my favourite colour.", model=None))["response"]
        == "Hello."
    )
    [router] = side_calls(upstream)
    assert router.json["generationConfig"]["responseMimeType"] == "application/json"
    assert MEMORY.search(router.body.decode()) is None
    assert "teal" in memory_blocks(turns(upstream)[-1].json)
    settle(mem, 1)
    [session] = mem.sessions(entity_id="default")
    assert [m.content for m in mem.history(session.session_id)] == [
        "Say hello about my favourite colour.",
        "Hello.",
    ]
    assert len(mem.exchanges(entity_id="default")) == 1


def test_mem_status_is_answered_by_the_proxy(gemini: GeminiCli, upstream: ScriptedModelServer) -> None:
    result = gemini_result(gemini.prompt("mem:status"))
    assert "memtap proxy: store duckdb:" in result["response"]
    assert "agent profile gemini-cli" in result["response"]
    assert "(derived from the conversation)" in result["response"]
    assert turns(upstream) == []


def test_a_session_named_in_gemini_cli_custom_headers_gets_its_history(
    gemini: GeminiCli, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    named = {"GEMINI_CLI_CUSTOM_HEADERS": "x-memtap-session: project-x, x-memtap-entity: alice"}
    upstream.script(Reply(text="Noted."))
    gemini_result(gemini.prompt("The staging cluster runs on Kubernetes.", **named))
    settle(mem, 1)
    upstream.script(Reply(text="Kubernetes."))
    gemini_result(gemini.prompt("Where does staging run?", **named))
    sent = turns(upstream)[-1]
    assert not any(name.startswith("x-memtap-") for name in sent.headers)  # read, never forwarded
    # two `gemini -p` runs, one named session: the earlier turn is injected as history,
    # before Gemini CLI's own first Content
    keys = content_keys(sent.json)
    expected = [
        "user: The staging cluster runs on",
        "model: Noted.",
        "user: <session_context>",
        "user: Where does",
    ]
    assert len(keys) == len(expected) and all(k.startswith(e) for k, e in zip(keys, expected)), keys
    settle(mem, 2)
    assert [m.content for m in mem.history("project-x")] == [
        "The staging cluster runs on Kubernetes.",
        "Noted.",
        "Where does staging run?",
        "Kubernetes.",
    ]
    assert mem.sessions(entity_id="default") == []
    assert [s.session_id for s in mem.sessions(entity_id="alice")] == ["project-x"]
