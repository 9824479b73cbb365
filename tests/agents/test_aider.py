"""aider (``aider --message``) through the memtap proxy with ``OPENAI_API_BASE``, with no
``x-memtap-*`` headers: a session per chat (``--restore-chat-history`` lands in it), its
few-shot examples, context turns and reminders never stored, its bytes unchanged (aider's
streams ask for no usage, and memtap adds none when it injects nothing)."""

from __future__ import annotations

from agents_support import (
    Aider,
    assert_no_scaffolding,
    chat_requests,
    memory_blocks,
    only_session_with,
    typed_turns,
)
from proxy_support import settle

import memtap
from memtap.testing.server import Reply, ScriptedModelServer
from memtap_agents import AIDER

#: What aider sends besides its user's words; never stored.
SCAFFOLDING = ("I am not sharing any files", "I switched to a new code base", "SEARCH/REPLACE", "Ok.")


def test_sessions_apart_restored_in_one_and_a_later_one_recalls(
    aider: Aider, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    told = "My favourite colour is teal, and my dog is called Biscuit."
    upstream.script(Reply(text="Noted: teal, and Biscuit."))
    aider.message(told).check()
    body = chat_requests(upstream, AIDER)[0]
    assert "stream_options" not in body  # nothing injected: aider's bytes as it sent them
    assert "<memtap-memory>" not in str(body)

    (aider.workdir / ".aider.chat.history.md").unlink()  # a new chat
    upstream.script(Reply(text="Paris."))
    aider.message("What is the capital of France?").check()
    upstream.script(Reply(text="About France."))
    aider.message("What did I ask you?", "--restore-chat-history").check()

    settle(mem, len(chat_requests(upstream, AIDER)))
    first = only_session_with(mem, told)
    second = only_session_with(mem, "What is the capital of France?")
    assert first != second
    assert typed_turns(mem, first) == [told]
    assert typed_turns(mem, second) == ["What is the capital of France?", "What did I ask you?"]

    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    (aider.workdir / ".aider.chat.history.md").unlink()
    upstream.script(Reply(text="Teal."))
    aider.message("What is my favourite colour?").check()
    body = chat_requests(upstream, AIDER)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    assert_no_scaffolding(mem, SCAFFOLDING)
    for s in mem.sessions(entity_id="default"):
        for m in mem.history(s.session_id):
            assert not any(marker in m.content for marker in SCAFFOLDING), m.content


def test_mem_status_is_answered_by_the_proxy(aider: Aider, upstream: ScriptedModelServer) -> None:
    run = aider.message("mem:status").check()
    assert "memtap proxy: store duckdb:" in run.stdout
    assert "agent profile aider" in run.stdout
    assert chat_requests(upstream, AIDER) == []  # the model never saw it
