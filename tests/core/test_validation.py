"""The scripted server refuses what the providers refuse: tool calls and results that do not
pair up (memtap.testing.validation), with their status, error body and message."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from memtap.testing.server import Reply, ScriptedModelServer
from memtap.testing.validation import (
    check_anthropic_messages,
    check_openai_chat,
    check_openai_responses,
)


def call(*ids: str, text: str | None = None) -> dict[str, Any]:
    calls = [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]
    return {"role": "assistant", "content": text, "tool_calls": calls}


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


USER = {"role": "user", "content": "hi"}


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


# -- OpenAI Chat Completions ---------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        chat(USER),
        chat(USER, call("a"), result("a")),
        chat({"role": "system", "content": "s"}, USER, call("a", "b"), result("b"), result("a"), USER),
        chat(USER, call("a", text="thinking"), result("a"), {"role": "assistant", "content": "done"}),
    ],
)
def test_openai_chat_accepts_paired_calls(body):
    assert check_openai_chat(body) is None


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (
            chat(USER, call("a"), USER),
            "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            "each 'tool_call_id'. The following tool_call_ids did not have response messages: a",
            "messages.[1].role",
        ),
        (
            chat(USER, call("a", "b"), result("a")),
            "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            "each 'tool_call_id'. The following tool_call_ids did not have response messages: b",
            "messages.[1].role",
        ),
        (
            chat(result("a"), USER),
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
            "with 'tool_calls'.",
            "messages.[0].role",
        ),
        (
            chat(USER, call("a"), USER, result("a")),
            "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            "each 'tool_call_id'. The following tool_call_ids did not have response messages: a",
            "messages.[1].role",
        ),
        (
            chat(USER, call("a"), result("z")),
            "Invalid parameter: 'tool_call_id' of 'z' not found in 'tool_calls' of previous message.",
            "messages.[2].tool_call_id",
        ),
    ],
)
def test_openai_chat_rejects_what_openai_rejects(body, message, param):
    rejection = check_openai_chat(body)
    assert rejection is not None
    assert rejection.status == 400
    assert rejection.body == {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    }


# -- OpenAI Responses ----------------------------------------------------------------------


def fc(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def fco(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_openai_responses_pairs_function_calls_and_outputs():
    assert check_openai_responses({"input": "hi"}) is None
    assert check_openai_responses({"input": [fc("a"), fco("a"), {"role": "user", "content": "x"}]}) is None
    missing = check_openai_responses({"input": [fc("a"), {"role": "user", "content": "x"}]})
    assert missing is not None and missing.message == "No tool output found for function call a."
    orphan = check_openai_responses({"input": [fco("b")]})
    assert orphan is not None
    assert orphan.message == "No tool call found for function call output with call_id b."
    assert check_openai_responses({"input": [fco("b")], "previous_response_id": "resp_1"}) is None


# -- Anthropic Messages --------------------------------------------------------------------


def use(*ids: str, text: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]
    return {"role": "assistant", "content": blocks}


def results(*ids: str, text: str | None = None, text_first: bool = False) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids]
    if text:
        words = {"type": "text", "text": text}
        blocks = [words, *blocks] if text_first else [*blocks, words]
    return {"role": "user", "content": blocks}


def claude(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude", "max_tokens": 8, "messages": list(messages)}


UNANSWERED = (
    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. "
    "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
)


@pytest.mark.parametrize(
    "body",
    [
        claude(USER),
        claude(USER, use("a", "b", text="checking"), results("b", "a", text="and then?")),
        claude(USER, use("a"), results("a"), {"role": "assistant", "content": "done"}, USER),
        claude(USER, {"role": "assistant", "content": ""}),  # prefill may be empty
    ],
)
def test_anthropic_accepts_paired_tool_use(body):
    assert check_anthropic_messages(body) is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (claude(USER, use("a"), USER), UNANSWERED.format(i=1, ids="a")),
        (claude(USER, use("a", "b"), results("a")), UNANSWERED.format(i=1, ids="b")),
        (claude(USER, use("a"), results("a", text="x", text_first=True)), UNANSWERED.format(i=1, ids="a")),
        (claude(USER, use("a")), UNANSWERED.format(i=1, ids="a")),
        (
            claude(results("a")),
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: a. Each "
            "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
        (
            claude(USER, use("a"), results("a"), results("a")),
            "messages.3.content.0: unexpected `tool_use_id` found in `tool_result` blocks: a. Each "
            "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
        (
            claude(USER, {"role": "assistant", "content": ""}, USER),
            "messages.1: all messages must have non-empty content except for the optional final "
            "assistant message",
        ),
    ],
)
def test_anthropic_rejects_what_anthropic_rejects(body, message):
    rejection = check_anthropic_messages(body)
    assert rejection is not None
    assert rejection.status == 400
    assert rejection.body == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


# -- the server ----------------------------------------------------------------------------


def test_the_server_refuses_without_consuming_a_reply(server: ScriptedModelServer):
    server.script(Reply(text="kept for the next valid call"))
    with httpx.Client(base_url=server.base_url) as client:
        refused = client.post("/v1/chat/completions", json=chat(USER, call("a"), USER))
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "messages.[1].role"
        answered = client.post("/v1/chat/completions", json=chat(USER)).json()
        assert answered["choices"][0]["message"]["content"] == "kept for the next valid call"
        refused = client.post("/v1/messages", json=claude(USER, use("a"), USER))
        assert refused.json()["error"]["message"] == UNANSWERED.format(i=1, ids="a")
    assert [message for _, message in server.rejected] == [
        check_openai_chat(chat(USER, call("a"), USER)).message,  # type: ignore[union-attr]
        UNANSWERED.format(i=1, ids="a"),
    ]
    assert len(server.requests) == 3  # refused requests are recorded too


def test_validation_can_be_turned_off():
    with ScriptedModelServer(validate=False) as server, httpx.Client(base_url=server.base_url) as client:
        answered = client.post("/v1/chat/completions", json=chat(USER, call("a"), USER))
        assert answered.status_code == 200
        assert server.rejected == []
