"""The scripted server refuses unpaired tool calls as OpenAI does, and the real SDK raises
what it raises for OpenAI's answer (so tests against the server catch what OpenAI would)."""

from __future__ import annotations

import openai
import pytest
from openai_support import API_KEY

from memtap.testing.server import ScriptedModelServer


def test_the_sdk_raises_openais_error_for_an_unanswered_call(server: ScriptedModelServer) -> None:
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "user", "content": "never mind"},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        bare.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "message": "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_1",
        "type": "invalid_request_error",
        "param": "messages.[1].role",
        "code": None,
    }
    messages[2] = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert bare.chat.completions.create(model="m", messages=messages).choices  # type: ignore[arg-type]


def test_the_sdk_raises_openais_error_for_an_orphan_function_output(server: ScriptedModelServer) -> None:
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    orphan = [{"type": "function_call_output", "call_id": "call_9", "output": "42"}]
    with pytest.raises(openai.BadRequestError, match="No tool call found for function call output"):
        bare.responses.create(model="m", input=orphan)  # type: ignore[arg-type]
