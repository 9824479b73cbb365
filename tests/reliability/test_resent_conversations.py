"""Apps that resend their conversation, for longer than the history cache (issue #13, item 2).

Each Memory caches at most 200 messages per session. Whatever the conversation's length, a
resent turn must be neither stored again nor injected again: 150 turns store 2 x 150
messages, and no request carries a message twice. Real openai SDK, DuckDB file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from reliability_support import API_KEY

import memtap
from memtap.formats.blocks import OPEN_TAG
from memtap.testing.server import ScriptedModelServer

TURNS = 150


def _client(mem: memtap.Memory, server: ScriptedModelServer) -> openai.OpenAI:
    return mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


def _no_message_twice(server: ScriptedModelServer) -> None:
    for number, request in enumerate(server.requests):
        messages = [json.dumps(m, sort_keys=True) for m in request.json["messages"]]
        assert len(messages) == len(set(messages)), f"request {number} carries a message twice"


def _converse(store_url: str, server: ScriptedModelServer, window: int | None, restart_at: int) -> list[Any]:
    """``TURNS`` turns of an app that resends its conversation (the last ``window``
    messages of it, or all), with a new Memory at turn ``restart_at``."""
    conversation: list[dict[str, Any]] = []
    mem = memtap.Memory(store_url)
    client = _client(mem, server)
    try:
        for turn in range(TURNS):
            if turn == restart_at:
                mem.close()
                mem = memtap.Memory(store_url)
                client = _client(mem, server)
            conversation.append({"role": "user", "content": f"question {turn}"})
            sent = conversation if window is None else conversation[-window:]
            with mem.scope(entity_id="resender", session_id="long"):
                reply = client.chat.completions.create(model="m", messages=sent)
            conversation.append({"role": "assistant", "content": reply.choices[0].message.content})
        assert mem.flush(60)
        return mem.history("long", entity_id="resender")
    finally:
        mem.close()


def conversation(messages: list[dict]) -> list[dict]:
    """A request's messages without memtap's memory block (answers recalled as episodes)."""
    return [m for m in messages if not str(m.get("content", "")).startswith(OPEN_TAG)]


@pytest.mark.parametrize("window", [None, 31], ids=["everything", "window"])
def test_resent_conversation_is_stored_once(
    window: int | None, server: ScriptedModelServer, tmp_path: Path
) -> None:
    stored = _converse(f"duckdb:///{tmp_path / 'm.duckdb'}", server, window, restart_at=TURNS // 2)
    assert len(stored) == 2 * TURNS
    assert [m.content for m in stored[::2]] == [f"question {t}" for t in range(TURNS)]
    assert [m.content for m in stored[1::2]] == [f"You said: question {t}" for t in range(TURNS)]
    _no_message_twice(server)
    if window is None:  # nothing to add to a conversation the app sends whole
        assert [len(r.json["messages"]) for r in server.requests] == [2 * t + 1 for t in range(TURNS)]
    else:  # the window is completed by the 20 messages before it (a memory block aside)
        assert all(len(conversation(r.json["messages"])) <= window + 20 for r in server.requests)


def test_an_app_sending_only_new_messages_gets_the_history_once(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    store_url = f"duckdb:///{tmp_path / 'm.duckdb'}"
    for part in range(2):  # a restart in between
        with memtap.Memory(store_url) as mem, mem.scope(entity_id="terse", session_id="s"):
            client = _client(mem, server)
            for turn in range(part * 120, (part + 1) * 120):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"question {turn}"}]
                )
            assert mem.flush(60)
            stored = mem.history("s", entity_id="terse")
    assert len(stored) == 2 * 240
    _no_message_twice(server)
    assert [len(r.json["messages"]) for r in server.requests[-3:]] == [21, 21, 21]


class SlowFormatting:
    """Holds the formatting of the session's first call until the server has received
    the second call's request (or 10 s pass)."""

    def __init__(self, server: ScriptedModelServer) -> None:
        self.server = server
        self.held = 0
        self.waited = 0.0

    @memtap.hookimpl(tryfirst=True)
    def memtap_format_exchange(self, raw: Any) -> None:
        if self.held:
            return None
        self.held += 1
        started = time.monotonic()
        while len(self.server.requests) < 2 and time.monotonic() - started < 10:
            time.sleep(0.005)
        self.waited = time.monotonic() - started
        return None  # the built-in formatter formats it


def test_nothing_injected_the_next_call_does_not_wait_for_the_previous_ones_formatting(
    server: ScriptedModelServer, tmp_path: Path
) -> None:
    """With history off, a call's resend check is made by the capture writer, so the next
    call of the session is sent while the capture writer formats the previous one (before,
    the request path formatted it first, or waited for the writer to)."""
    slow = SlowFormatting(server)
    mem = memtap.Memory(
        f"duckdb:///{tmp_path / 'm.duckdb'}",
        history=memtap.HistoryBudget(max_messages=0),
        embedder=False,
        episodes=False,
        recall=memtap.RecallBudget(k=0),
        plugins=[slow],
    )
    client = _client(mem, server)
    try:
        conversation: list[dict[str, Any]] = [{"role": "user", "content": "question 0"}]
        with mem.scope(entity_id="resender", session_id="slow"):
            reply = client.chat.completions.create(model="m", messages=conversation)
            conversation += [
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": "question 1"},
            ]
            client.chat.completions.create(model="m", messages=conversation)
        assert mem.flush(30)
        stored = mem.history("slow", entity_id="resender")
    finally:
        mem.close()
    assert slow.waited < 5, "the second call was held until the first was formatted"
    assert [m.content for m in stored] == [
        "question 0",
        "You said: question 0",
        "question 1",
        "You said: question 1",
    ]
