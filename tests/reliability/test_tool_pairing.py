"""Tool calls the app never answers do not poison a session (issue #13, item 1).

The model answers with a tool call and the app moves on without running it (common in chat
apps). memtap stores the call, but must never inject it without its results: OpenAI and
Anthropic reject such a request, and every later one of the session. The scripted server
enforces the providers' own pairing rules (:mod:`memtap.testing.validation`); each test
drives the real SDKs through a registered client, restarts (a new Memory on the same store),
and asserts that no request was rejected and every body sent pairs its calls and results.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from reliability_support import API_KEY, BACKENDS

import memtap
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec
from memtap.testing.validation import check_anthropic_messages, check_openai_chat, check_openai_responses

ANTHROPIC_KEY = "sk-ant-RELIABILITYsecret0123456789abcdef"
WEATHER = ToolCallSpec(name="get_weather", arguments='{"city": "Paris"}')
TIME = ToolCallSpec(name="get_time", arguments='{"tz": "CET"}')


def _openai(mem: memtap.Memory, server: ScriptedModelServer) -> openai.OpenAI:
    return mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


def _anthropic(mem: memtap.Memory, server: ScriptedModelServer) -> anthropic.Anthropic:
    return mem.register(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=ANTHROPIC_KEY, max_retries=0)
    )


def _chat(client: openai.OpenAI, messages: list[dict[str, Any]], *, stream: bool = False) -> dict[str, Any]:
    if stream:
        text, calls = "", []
        for chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                calls += [c.id for c in choice.delta.tool_calls or () if c.id]
        return {"role": "assistant", "content": text, "calls": calls}
    message = client.chat.completions.create(model="m", messages=messages).choices[0].message
    calls = [c.id for c in message.tool_calls or ()]
    return {"role": "assistant", "content": message.content or "", "calls": calls}


def _claude(client: anthropic.Anthropic, messages: list[dict[str, Any]], *, stream: bool = False) -> Any:
    if stream:
        with client.messages.stream(model="claude", max_tokens=64, messages=messages) as events:
            return events.get_final_message()
    return client.messages.create(model="claude", max_tokens=64, messages=messages)


def _assert_all_accepted(server: ScriptedModelServer, check: Callable[[Any], Any]) -> None:
    assert [message for _, message in server.rejected] == []
    for request in server.requests:
        assert check(request.json) is None


def _restart(store_url: str) -> memtap.Memory:
    return memtap.Memory(store_url)


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_openai_unanswered_call_then_new_messages_only(store_url: str, server: ScriptedModelServer) -> None:
    with _restart(store_url) as mem, mem.scope(entity_id="u1", session_id="s1"):
        client = _openai(mem, server)
        server.script(Reply(tool_calls=(WEATHER,)))
        first = _chat(client, [{"role": "user", "content": "What is the weather in Paris?"}])
        assert first["calls"]
        for i in range(3):  # the app never runs the tool and sends only its new messages
            _chat(client, [{"role": "user", "content": f"Never mind, tell me a joke {i}"}], stream=i == 1)
        assert mem.flush(30)
        stored = mem.history("s1", entity_id="u1")
        assert [c.id for m in stored for c in m.tool_calls] == first["calls"]  # kept as the record
    with _restart(store_url) as mem, mem.scope(entity_id="u1", session_id="s1"):
        client = _openai(mem, server)
        for i in range(2):
            _chat(client, [{"role": "user", "content": f"After the restart {i}"}], stream=i == 0)
        sent = server.last_json()["messages"]
        assert next(m["content"] for m in sent if m["role"] == "user") == "What is the weather in Paris?"
    assert len(server.requests) == 6
    _assert_all_accepted(server, check_openai_chat)
    for request in server.requests[1:]:
        assert "tool_calls" not in json.dumps(request.json)


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_anthropic_unanswered_call_then_new_messages_only(
    store_url: str, server: ScriptedModelServer
) -> None:
    with _restart(store_url) as mem, mem.scope(entity_id="u1", session_id="s1"):
        client = _anthropic(mem, server)
        server.script(Reply(text="Let me check.", tool_calls=(WEATHER,)))
        first = _claude(client, [{"role": "user", "content": "What is the weather in Paris?"}])
        assert first.stop_reason == "tool_use"
        for i in range(3):
            _claude(client, [{"role": "user", "content": f"Never mind, tell me a joke {i}"}], stream=i == 1)
    with _restart(store_url) as mem, mem.scope(entity_id="u1", session_id="s1"):
        client = _anthropic(mem, server)
        for i in range(2):
            _claude(client, [{"role": "user", "content": f"After the restart {i}"}], stream=i == 0)
        assert "Let me check." in json.dumps(server.last_json()["messages"])  # the call's text stays
    assert len(server.requests) == 6
    _assert_all_accepted(server, check_anthropic_messages)
    for request in server.requests[1:]:
        assert '"tool_use"' not in json.dumps(request.json)


def test_openai_app_resending_its_conversation_without_the_call(
    store_url: str, server: ScriptedModelServer
) -> None:
    """The app keeps its own conversation and leaves the call it did not run out of it."""
    conversation: list[dict[str, Any]] = []

    def say(client: openai.OpenAI, text: str) -> None:
        conversation.append({"role": "user", "content": text})
        answer = _chat(client, conversation)
        conversation.append({"role": "assistant", "content": answer["content"] or "(no answer)"})

    with _restart(store_url) as mem, mem.scope(entity_id="u2", session_id="s2"):
        client = _openai(mem, server)
        say(client, "Hello there")
        server.script(Reply(text="Checking.", tool_calls=(WEATHER, TIME)))
        say(client, "Weather and time in Paris?")
        say(client, "Forget it")
    with _restart(store_url) as mem, mem.scope(entity_id="u2", session_id="s2"):
        client = _openai(mem, server)
        say(client, "Still there?")
        assert mem.flush(30)
        stored = [m.content for m in mem.history("s2", entity_id="u2") if m.role == "user"]
    assert stored == ["Hello there", "Weather and time in Paris?", "Forget it", "Still there?"]
    _assert_all_accepted(server, check_openai_chat)
    assert len(server.last_json()["messages"]) == len(conversation) - 1  # nothing injected twice


@pytest.mark.parametrize("flavour", ["openai", "anthropic"])
def test_results_sent_alone_are_paired_with_the_stored_call(
    flavour: str, store_url: str, server: ScriptedModelServer
) -> None:
    """An app that sends only new messages answers the call memtap stored (even after a
    restart), and answers only one of two parallel calls."""
    with _restart(store_url) as mem, mem.scope(entity_id="u3", session_id="s3"):
        server.script(Reply(tool_calls=(WEATHER, TIME)))
        if flavour == "openai":
            client = _openai(mem, server)
            calls = _chat(client, [{"role": "user", "content": "Weather and time in Paris?"}])["calls"]
        else:
            claude = _anthropic(mem, server)
            message = _claude(claude, [{"role": "user", "content": "Weather and time in Paris?"}])
            calls = [block.id for block in message.content if block.type == "tool_use"]
    assert len(calls) == 2
    with _restart(store_url) as mem, mem.scope(entity_id="u3", session_id="s3"):
        if flavour == "openai":
            client = _openai(mem, server)
            _chat(client, [{"role": "tool", "tool_call_id": calls[0], "content": "18 C"}])
            _chat(client, [{"role": "user", "content": "Thanks!"}], stream=True)
        else:
            claude = _anthropic(mem, server)
            result = {"type": "tool_result", "tool_use_id": calls[0], "content": "18 C"}
            _claude(claude, [{"role": "user", "content": [result]}])
            _claude(claude, [{"role": "user", "content": "Thanks!"}], stream=True)
        assert mem.flush(30)
        stored = mem.history("s3", entity_id="u3")
    _assert_all_accepted(server, check_openai_chat if flavour == "openai" else check_anthropic_messages)
    answered = json.dumps(server.requests[1].json)
    assert calls[0] in answered and calls[1] not in answered  # only the answered call is sent
    assert [m.tool_call_id for m in stored if m.role == "tool"] == [calls[0]]


def test_openai_responses_unanswered_and_answered_calls(store_url: str, server: ScriptedModelServer) -> None:
    """The Responses API: a function call answered by an input holding only its output, then
    one the app never runs; before and after a restart."""
    with _restart(store_url) as mem, mem.scope(entity_id="u4", session_id="s4"):
        client = _openai(mem, server)
        server.script(Reply(tool_calls=(WEATHER,)))
        first = client.responses.create(model="m", input="Weather in Paris?")
        (call_id,) = [item.call_id for item in first.output if item.type == "function_call"]
        client.responses.create(
            model="m", input=[{"type": "function_call_output", "call_id": call_id, "output": "18 C"}]
        )
        server.script(Reply(tool_calls=(TIME,)))
        client.responses.create(model="m", input="And the time?")
        client.responses.create(model="m", input="Never mind")
    with _restart(store_url) as mem, mem.scope(entity_id="u4", session_id="s4"):
        client = _openai(mem, server)
        client.responses.create(model="m", input="After the restart")
    _assert_all_accepted(server, check_openai_responses)
    final = json.dumps(server.last_json()["input"])
    assert call_id in final and '"get_time"' not in final  # the answered call stays, not the other
