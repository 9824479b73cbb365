"""One Claude turn (thinking, an answer over two text blocks, tool use with non-ASCII
input) is stored as :mod:`memtap.testing.anthropic_turn` says, streamed or not: the same
literal memtap-bedrock's tests hold its ``invoke_model`` calls to."""

from __future__ import annotations

import json

import pytest

from memtap.testing import anthropic_turn as turn
from memtap.testing.server import Reply


@pytest.mark.parametrize("stream", [False, True])
def test_a_claude_turn_is_stored_as_the_codec_says(client, server, mem, stream):
    raw = turn.sse(turn.RESPONSE_EVENTS) if stream else json.dumps(turn.RESPONSE).encode()
    server.script(Reply(raw_body=raw))
    with mem.scope(session_id="turn"):
        if stream:
            with client.messages.stream(**turn.REQUEST) as events:
                events.until_done()
        else:
            client.messages.create(**turn.REQUEST)
    assert mem.flush(10)
    assert tuple(mem.history("turn")) == turn.STORED
    (exchange,) = mem.store.exchanges(session_id="turn")
    assert (exchange.system, exchange.usage, exchange.finish_reasons) == (
        turn.STORED_SYSTEM,
        turn.STORED_USAGE,
        ("tool_use",),
    )
