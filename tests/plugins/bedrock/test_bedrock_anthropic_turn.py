"""One Claude turn (thinking, an answer over two text blocks, tool use with non-ASCII
input) sent through ``invoke_model`` is stored exactly as through the anthropic SDK: the
literal of :mod:`memtap.testing.anthropic_turn`, which memtap-anthropic's tests hold too."""

from __future__ import annotations

import json

import pytest
from bedrock_server import make_bedrock

from memtap.protocol.model import Attribution, Exchange, Message, ToolCall
from memtap.testing import anthropic_turn as turn
from memtap.testing.server import Reply
from memtap.testing.validation import check_anthropic_messages


@pytest.mark.parametrize("stream", [False, True])
def test_a_claude_turn_is_stored_as_through_the_anthropic_sdk(mem, bedrock_server, stream):
    events = turn.RESPONSE_EVENTS if stream else turn.RESPONSE
    bedrock_server.script(Reply(raw_body=json.dumps(events).encode()))
    client = mem.register(make_bedrock(bedrock_server.base_url))
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        **{k: v for k, v in turn.REQUEST.items() if k != "model"},
    }
    with mem.scope(session_id="turn"):
        if stream:
            list(client.invoke_model_with_response_stream(modelId=turn.MODEL, body=json.dumps(body))["body"])
        else:
            client.invoke_model(modelId=turn.MODEL, body=json.dumps(body))["body"].read()
    assert mem.flush(10)
    assert tuple(mem.history("turn")) == turn.STORED
    (exchange,) = mem.store.exchanges(session_id="turn")
    assert (exchange.system, exchange.usage, exchange.finish_reasons) == (
        turn.STORED_SYSTEM,
        turn.STORED_USAGE,
        ("tool_use",),
    )


def test_injected_history_is_written_as_for_the_anthropic_api(mem, store, bedrock_server):
    # A stored session that opens with an assistant turn and ends with an unanswered
    # tool_use: neither may stand before the app's message (Anthropic's validation).
    store.write_exchanges(
        [
            Exchange(
                attribution=Attribution(session_id="open"),
                provider="aws.bedrock",
                operation="chat",
                input=i,
                output=o,
            )
            for i, o in (
                ([], [Message(role="assistant", content="welcome!")]),
                (
                    [Message(role="user", content="time?")],
                    [Message(role="assistant", tool_calls=[ToolCall(id="t9", name="clock")])],
                ),
            )
        ]
    )
    client = mem.register(make_bedrock(bedrock_server.base_url))
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with mem.scope(session_id="open"):
        client.invoke_model(modelId=turn.MODEL, body=json.dumps(body))["body"].read()
    sent = bedrock_server.last_json()
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert check_anthropic_messages(sent) is None
