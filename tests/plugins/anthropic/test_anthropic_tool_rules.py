"""The scripted server refuses unpaired tool use as Anthropic does, and the real SDK raises
what it raises for Anthropic's answer (so tests against the server catch what Anthropic would)."""

from __future__ import annotations

import anthropic
import pytest

from memtap.testing.server import ScriptedModelServer


def test_the_sdk_raises_anthropics_error_for_tool_use_without_result(
    server: ScriptedModelServer, bare: anthropic.Anthropic
) -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
        {"role": "user", "content": "never mind"},
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        bare.messages.create(model="claude", max_tokens=8, messages=messages)  # type: ignore[arg-type]
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in "
            "the next message.",
        },
    }
    messages[2] = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
    }
    assert bare.messages.create(model="claude", max_tokens=8, messages=messages).content  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
        bare.messages.create(model="claude", max_tokens=8, messages=[messages[2]])  # type: ignore[arg-type]
