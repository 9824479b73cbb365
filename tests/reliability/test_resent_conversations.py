"""Apps that resend their conversation, for longer than the history cache (issue #13, item 2).

Each Memory caches at most 200 messages per session. Whatever the conversation's length, a
resent turn must be neither stored again nor injected again: 150 turns store 2 x 150
messages, and no request carries a message twice. Real openai SDK, DuckDB file.
"""

from __future__ import annotations

import json
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
