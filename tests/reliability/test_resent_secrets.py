"""A resent conversation that holds a secret is still recognised as resent.

memtap stores a turn with the secret redacted; the app, resending its conversation, still
holds the secret. Compared as they are, the two copies differ: the conversation was then
captured again on every call (the whole of it stored once more) and, with history on, the
stored copy of the turn was injected next to the app's own. Every credential format of the
corpus, said by the user and echoed by the model, with history off (capture only) and on:
each turn is stored once, no request carries a turn twice, and no secret is stored. Real
openai SDK, DuckDB file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from reliability_support import API_KEY

import memtap
from memtap.testing.secrets import SECRETS, FakeSecret, leaked
from memtap.testing.server import ScriptedModelServer

TURNS = 4
INLINE = [s for s in SECRETS if s.inline]


def _converse(mem: memtap.Memory, server: ScriptedModelServer, secret: FakeSecret) -> list[dict[str, Any]]:
    """``TURNS`` turns of an app that resends its whole conversation; the second says the
    secret (the model's answer echoes it)."""
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    conversation: list[dict[str, Any]] = []
    with mem.scope(entity_id="resender", session_id="secret"):
        for turn in range(TURNS):
            said = f"here is my credential: {secret.text} (turn {turn})" if turn == 1 else f"question {turn}"
            conversation.append({"role": "user", "content": said})
            reply = client.chat.completions.create(model="m", messages=conversation)
            conversation.append({"role": "assistant", "content": reply.choices[0].message.content})
    return conversation


@pytest.mark.parametrize("history", [0, 20], ids=["capture-only", "history"])
@pytest.mark.parametrize("secret", INLINE, ids=[s.name for s in INLINE])
def test_a_resent_turn_with_a_secret_is_stored_once_and_never_sent_twice(
    secret: FakeSecret, history: int, server: ScriptedModelServer, tmp_path: Path
) -> None:
    mem = memtap.Memory(
        f"duckdb:///{tmp_path / 'm.duckdb'}",
        history=memtap.HistoryBudget(max_messages=history),
        embedder=False,
        episodes=False,
        recall=memtap.RecallBudget(k=0),
    )
    try:
        _converse(mem, server, secret)
        assert mem.flush(30)
        stored = mem.history("secret", entity_id="resender")
        exchanges = list(mem.store.exchanges(entity_id="resender"))
    finally:
        mem.close()
    assert len(stored) == 2 * TURNS, [m.content for m in stored]
    assert [len(e.input) for e in exchanges] == [1] * TURNS  # each call stored its new turn only
    for number, request in enumerate(server.requests):
        messages = [json.dumps(m, sort_keys=True) for m in request.json["messages"]]
        assert len(messages) == len(set(messages)), f"request {number} carries a message twice"
        assert len(messages) == 2 * number + 1  # nothing added to a conversation sent whole
    assert not any(leaked(secret, m.content) for m in stored)
