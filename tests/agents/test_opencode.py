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
    ASKED,
    FOLLOW_UP,
    NOTES_ANSWER,
    NOTES_CALL_ID,
    READ_NOTES,
    TOLD,
    Opencode,
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
from memtap_agents import OPENCODE

#: What opencode sends besides its user's words; never stored.
SCAFFOLDING = ("Generate a title", "title generator", '"My favourite')


def twice(text: str) -> tuple[Reply, Reply]:
    """The replies of a run that also asks for a title (in either order)."""
    return Reply(text=text), Reply(text=text)


def test_sessions_apart_continue_in_one_and_a_later_one_recalls(
    opencode: Opencode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    upstream.script(*twice("Noted: teal, and Biscuit."))
    opencode.run(TOLD).check()
    upstream.script(*twice("Paris."))
    opencode.run(ASKED).check()
    upstream.script(Reply(text="About France."))
    opencode.run("--continue", FOLLOW_UP).check()  # the latest session: France

    settle(mem, len(chat_requests(upstream, OPENCODE)))
    assert_sessions_apart(mem)  # typed without the quotes opencode run adds

    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    upstream.script(*twice("Teal."))
    opencode.run("What is my favourite colour?").check()
    body = chat_requests(upstream, OPENCODE)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    titles = [r.json for r in upstream.requests if r.json and "title generator" in json.dumps(r.json)]
    assert titles and not any("<memtap-memory>" in json.dumps(t) for t in titles)  # never injected
    assert_nothing_stored_holds(mem, SCAFFOLDING)


def test_mem_status_is_answered_by_the_proxy(opencode: Opencode, upstream: ScriptedModelServer) -> None:
    assert_status_answered(opencode.run("mem:status").check(), upstream, OPENCODE)


def test_a_tool_loop_completes_with_valid_stored_history(
    opencode: Opencode, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    notes = opencode.workdir / "notes.txt"
    read = ToolCallSpec("read", json.dumps({"filePath": str(notes)}), id=NOTES_CALL_ID)
    upstream.script(Reply(tool_calls=[read]), Reply(text=NOTES_ANSWER))
    with ScriptedModelServer() as titles:
        opencode.titles_from(titles.base_url)
        run = opencode.run(READ_NOTES).check()
    assert_notes_loop_stored(run, upstream, OPENCODE, mem)
