"""opencode (``opencode run``) through the memtap proxy, as an ``@ai-sdk/openai-compatible``
provider, with no ``x-memtap-*`` headers: its session from its ``x-session-id`` header, its
title calls neither injected into nor stored, its quoted prompts read as typed.

``opencode run`` asks for a new session's title (a side call) while it runs the turn, in
either order: a run's two calls get the same scripted reply, or (the tool loop) titles go to
a model server of their own (opencode's ``small_model``).
"""

from __future__ import annotations

import json

from agents_support import (
    Opencode,
    assert_no_scaffolding,
    chat_requests,
    memory_blocks,
    only_session_with,
    typed_turns,
)
from proxy_support import settle

import memtap
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec
from memtap_agents import OPENCODE

#: What opencode sends besides its user's words; never stored.
SCAFFOLDING = ("Generate a title", "title generator", '"My favourite')


def twice(text: str) -> tuple[Reply, Reply]:
    """The replies of a run that also asks for a title (in either order)."""
    return Reply(text=text), Reply(text=text)


def test_sessions_apart_continue_in_one_and_a_later_one_recalls(
    opencode: Opencode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    told = "My favourite colour is teal, and my dog is called Biscuit."
    upstream.script(*twice("Noted: teal, and Biscuit."))
    opencode.run(told).check()
    upstream.script(*twice("Paris."))
    opencode.run("What is the capital of France?").check()
    upstream.script(Reply(text="About France."))
    opencode.run("--continue", "What did I ask you?").check()  # the latest session: France

    settle(mem, len(chat_requests(upstream, OPENCODE)))
    first = only_session_with(mem, told)  # typed without the quotes opencode run adds
    second = only_session_with(mem, "What is the capital of France?")
    assert first != second
    assert typed_turns(mem, first) == [told]
    assert typed_turns(mem, second) == ["What is the capital of France?", "What did I ask you?"]

    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(*twice("Teal."))
    opencode.run("What is my favourite colour?").check()
    body = chat_requests(upstream, OPENCODE)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    titles = [r.json for r in upstream.requests if r.json and "title generator" in json.dumps(r.json)]
    assert titles and not any("<memtap-memory>" in json.dumps(t) for t in titles)  # never injected
    assert_no_scaffolding(mem, SCAFFOLDING)
    for s in mem.sessions(entity_id="default"):
        for m in mem.history(s.session_id):
            assert not any(marker in m.content for marker in SCAFFOLDING), m.content


def test_mem_status_is_answered_by_the_proxy(opencode: Opencode, upstream: ScriptedModelServer) -> None:
    run = opencode.run("mem:status").check()
    assert "memtap proxy: store duckdb:" in run.stdout
    assert "agent profile opencode" in run.stdout
    assert chat_requests(upstream, OPENCODE) == []  # the model never saw it


def test_a_tool_loop_completes_with_valid_stored_history(
    opencode: Opencode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    notes = opencode.workdir / "notes.txt"
    read = ToolCallSpec("read", json.dumps({"filePath": str(notes)}), id="call_read_notes")
    upstream.script(Reply(tool_calls=[read]), Reply(text="It says the deploy key rotates on Fridays."))
    with ScriptedModelServer() as titles:
        opencode.titles_from(titles.base_url)
        run = opencode.run("Read notes.txt and tell me what it says.").check()
    assert "Fridays" in run.stdout
    requests = chat_requests(upstream, OPENCODE)
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
