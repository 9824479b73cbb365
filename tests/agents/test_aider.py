"""aider (``aider --message``) through the memtap proxy with ``OPENAI_API_BASE``, with no
``x-memtap-*`` headers: a session per chat (``--restore-chat-history`` lands in it), its
few-shot examples, context turns and reminders never stored, its bytes unchanged (aider's
streams ask for no usage, and memtap adds none when it injects nothing)."""

from __future__ import annotations

from agents_support import (
    ASKED,
    FOLLOW_UP,
    TOLD,
    Aider,
    assert_nothing_stored_holds,
    assert_sessions_apart,
    assert_status_answered,
    chat_requests,
    memory_blocks,
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
    upstream.script(Reply(text="Noted: teal, and Biscuit."))
    aider.message(TOLD).check()
    body = chat_requests(upstream, AIDER)[0]
    assert "stream_options" not in body  # nothing injected: aider's bytes as it sent them
    assert "<memtap-memory>" not in str(body)

    (aider.workdir / ".aider.chat.history.md").unlink()  # a new chat
    upstream.script(Reply(text="Paris."))
    aider.message(ASKED).check()
    upstream.script(Reply(text="About France."))
    aider.message(FOLLOW_UP, "--restore-chat-history").check()

    settle(mem, len(chat_requests(upstream, AIDER)))
    assert_sessions_apart(mem)

    mem.recall("favourite colour", entity_id="default")  # a warm index, as in a running proxy
    (aider.workdir / ".aider.chat.history.md").unlink()
    upstream.script(Reply(text="Teal."))
    aider.message("What is my favourite colour?").check()
    body = chat_requests(upstream, AIDER)[-1]
    assert "teal" in memory_blocks(body)  # recalled from the first session
    assert_nothing_stored_holds(mem, SCAFFOLDING)


def test_mem_status_is_answered_by_the_proxy(aider: Aider, upstream: ScriptedModelServer) -> None:
    assert_status_answered(aider.message("mem:status").check(), upstream, AIDER)
