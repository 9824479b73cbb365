"""memtap.formats.anthropic_messages: the one Anthropic Messages codec (memtap-anthropic, Bedrock's
Anthropic bodies, the proxy), checked on the turn of :mod:`memtap.testing.anthropic_turn`."""

from __future__ import annotations

from memtap.formats.anthropic_messages import (
    AnthropicFormatProtocol,
    read_messages_request,
    read_messages_response,
    write_history,
)
from memtap.protocol.model import Message, ToolCall
from memtap.protocol.wire import InjectionPlan
from memtap.testing import anthropic_turn as turn


def test_request_and_response_read_as_the_turn_is_stored():
    request = read_messages_request(turn.REQUEST)
    response = read_messages_response(turn.RESPONSE)
    assert (*request.messages, *response.messages) == turn.STORED
    assert (request.system, request.model, request.stream) == (turn.STORED_SYSTEM, turn.MODEL, False)
    assert (response.usage, response.finish_reasons) == (turn.STORED_USAGE, ("tool_use",))


def test_the_streamed_response_reads_as_the_complete_one():
    accumulator = AnthropicFormatProtocol().new_accumulator()
    for event in turn.RESPONSE_EVENTS:
        accumulator.feed(event)
    assert accumulator.result() == read_messages_response(turn.RESPONSE)


def test_history_is_written_without_thinking_and_reads_back_the_same():
    stored = turn.STORED[:-1]  # ends with the user's turn
    written = write_history(stored, None)
    assert written[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Ich sehe nach."},
            {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Zürich"}},
        ],
    }
    assert read_messages_request({"messages": written}).messages == stored


def test_injection_puts_history_before_the_apps_messages():
    history = (
        Message(role="user", content="hi"),
        Message(role="assistant", content="", tool_calls=(ToolCall(id="t", name="f", arguments="{}"),)),
        Message(role="tool", content="ok", tool_call_id="t"),
        Message(role="assistant", content="done"),
    )
    body = {"messages": [{"role": "user", "content": "next"}]}
    out = AnthropicFormatProtocol().inject(body, InjectionPlan(history=history))
    assert out["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    assert body == {"messages": [{"role": "user", "content": "next"}]}
