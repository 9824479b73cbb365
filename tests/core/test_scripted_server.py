"""Wire-shape tests for the scripted model server (httpx + stdlib only, no provider SDKs)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memtap.testing.server import RecordedRequest, Reply, ScriptedModelServer, ToolCallSpec

WEATHER = ToolCallSpec("get_weather", '{"city": "Tokyo", "unit": "c"}')


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as http:
        yield http


def sse(response: httpx.Response) -> list[tuple[str | None, str]]:
    """Parse an SSE body into (event name, data) pairs."""
    events = []
    normalized = response.text.replace("\r\n", "\n")
    for block in normalized.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        events.append((name, "\n".join(data)))
    return events


def sse_json(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(data) for _, data in sse(response) if data != "[DONE]"]


def chat_body(**extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": [{"type": "text", "text": "second question"}]},
    ]
    return {"model": "gpt-test", "messages": messages, **extra}


# ----------------------------------------------------------------------------- OpenAI Chat


def test_chat_json_echoes_last_user_text(server: ScriptedModelServer, client: httpx.Client) -> None:
    response = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-test"
    assert body["id"]
    assert isinstance(body["created"], int)
    choice = body["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "content": "You said: second question",
        "refusal": None,
    }
    assert choice["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def test_chat_stream_shape(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="Hello world", chunks=3))
    response = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body(stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["transfer-encoding"] == "chunked"
    events = sse(response)
    assert events[-1] == (None, "[DONE]")
    chunks = sse_json(response)
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert all("usage" not in chunk for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks]
    assert "".join(pieces) == "Hello world"
    assert len([p for p in pieces if p]) == 3
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }


def test_chat_stream_include_usage(server: ScriptedModelServer, client: httpx.Client) -> None:
    body = chat_body(stream=True, stream_options={"include_usage": True})
    chunks = sse_json(client.post(f"{server.openai_base_url}/chat/completions", json=body))
    assert all(chunk["usage"] is None for chunk in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def test_chat_tool_calls_json(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(tool_calls=(WEATHER, ToolCallSpec("noop", "{}", id="call_given"))))
    body = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    first, second = choice["message"]["tool_calls"]
    assert first["type"] == "function"
    assert first["id"].startswith("call_")
    assert first["function"] == {"name": "get_weather", "arguments": WEATHER.arguments}
    assert second["id"] == "call_given"


def test_chat_tool_calls_stream(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="Checking.", tool_calls=(WEATHER,)))
    url = f"{server.openai_base_url}/chat/completions"
    chunks = sse_json(client.post(url, json=chat_body(stream=True)))
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    calls = [call for delta in deltas for call in delta.get("tool_calls", [])]
    assert calls[0]["index"] == 0
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert all(call["index"] == 0 and "id" not in call for call in calls[1:])
    arguments = "".join(call["function"]["arguments"] for call in calls)
    assert json.loads(arguments) == {"city": "Tokyo", "unit": "c"}
    assert "".join(delta.get("content") or "" for delta in deltas) == "Checking."
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


# ----------------------------------------------------------------------------- OpenAI Responses


def test_responses_json_string_input(server: ScriptedModelServer, client: httpx.Client) -> None:
    body = {"model": "gpt-r", "input": "hello responses", "instructions": "be nice"}
    response = client.post(f"{server.openai_base_url}/responses", json=body).json()
    assert response["object"] == "response"
    assert response["status"] == "completed"
    assert response["model"] == "gpt-r"
    assert response["instructions"] == "be nice"
    (message,) = response["output"]
    assert message["type"] == "message"
    assert message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["text"] == "You said: hello responses"
    usage = response["usage"]
    assert usage["input_tokens"] == 11
    assert usage["output_tokens"] == 7
    assert usage["total_tokens"] == 18
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0


def test_responses_json_item_input_and_tools(server: ScriptedModelServer, client: httpx.Client) -> None:
    items = [
        {"role": "user", "content": "older"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "newer"}]},
    ]
    url = f"{server.openai_base_url}/responses"
    echoed = client.post(url, json={"model": "m", "input": items}).json()
    assert echoed["output"][0]["content"][0]["text"] == "You said: newer"

    server.script(Reply(text="Let me check.", tool_calls=(WEATHER,)))
    output = client.post(url, json={"model": "m", "input": "x"}).json()["output"]
    assert [item["type"] for item in output] == ["message", "function_call"]
    call = output[1]
    assert call["name"] == "get_weather"
    assert call["arguments"] == WEATHER.arguments
    assert call["call_id"].startswith("call_")
    assert call["status"] == "completed"


def test_responses_stream_event_sequence(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="streamed text", tool_calls=(WEATHER,), chunks=2))
    response = client.post(
        f"{server.openai_base_url}/responses", json={"model": "m", "input": "x", "stream": True}
    )
    events = sse(response)
    names = [name for name, _ in events]
    payloads = [json.loads(data) for _, data in events]
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [p["type"] for p in payloads] == names
    assert [p["sequence_number"] for p in payloads] == list(range(len(names)))
    assert payloads[0]["response"]["status"] == "in_progress"
    deltas = [p["delta"] for p in payloads if p["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "streamed text"
    assert payloads[6]["text"] == "streamed text"
    args = [p["delta"] for p in payloads if p["type"].endswith("arguments.delta")]
    assert "".join(args) == WEATHER.arguments
    assert payloads[10]["output_index"] == 1
    final = payloads[-1]["response"]
    assert final["status"] == "completed"
    assert final["usage"]["total_tokens"] == 18
    assert final["output"][0]["content"][0]["text"] == "streamed text"
    assert final["output"][1]["arguments"] == WEATHER.arguments


def test_responses_incomplete(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="cut", finish_reason="length"), Reply(text="cut", finish_reason="length"))
    url = f"{server.openai_base_url}/responses"
    body = client.post(url, json={"model": "m", "input": "x"}).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    events = sse(client.post(url, json={"model": "m", "input": "x", "stream": True}))
    assert events[-1][0] == "response.incomplete"


# ----------------------------------------------------------------------------- Anthropic


def anthropic_body(**extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "bonjour"}]},
    ]
    return {"model": "claude-test", "max_tokens": 64, "messages": messages, **extra}


def test_anthropic_json(server: ScriptedModelServer, client: httpx.Client) -> None:
    body = client.post(f"{server.anthropic_base_url}/v1/messages", json=anthropic_body()).json()
    assert body["type"] == "message"
    assert body["role"] == "assistant"
    assert body["model"] == "claude-test"
    assert body["content"] == [{"type": "text", "text": "You said: bonjour"}]
    assert body["stop_reason"] == "end_turn"
    assert body["stop_sequence"] is None
    assert body["usage"]["input_tokens"] == 11
    assert body["usage"]["output_tokens"] == 7


def test_anthropic_tool_use_json(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(tool_calls=(WEATHER,)))
    body = client.post(f"{server.anthropic_base_url}/v1/messages", json=anthropic_body()).json()
    (block,) = body["content"]
    assert block["type"] == "tool_use"
    assert block["id"].startswith("toolu_")
    assert block["name"] == "get_weather"
    assert block["input"] == {"city": "Tokyo", "unit": "c"}
    assert body["stop_reason"] == "tool_use"


def test_anthropic_tool_result_turn_echoes_last_text(
    server: ScriptedModelServer, client: httpx.Client
) -> None:
    body = anthropic_body()
    body["messages"] += [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "1"}]},
    ]
    reply = client.post(f"{server.anthropic_base_url}/v1/messages", json=body).json()
    assert reply["content"][0]["text"] == "You said: bonjour"


def test_anthropic_stream(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="hello there", tool_calls=(WEATHER,), chunks=2, output_tokens=9))
    response = client.post(f"{server.anthropic_base_url}/v1/messages", json=anthropic_body(stream=True))
    events = sse(response)
    names = [name for name, _ in events]
    payloads = [json.loads(data) for _, data in events]
    assert [p["type"] for p in payloads] == names
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = payloads[0]["message"]
    assert start["content"] == []
    assert start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 11
    assert payloads[2]["content_block"] == {"type": "text", "text": ""}
    text = "".join(p["delta"]["text"] for p in payloads[3:5])
    assert text == "hello there"
    tool_start = payloads[6]["content_block"]
    assert tool_start["type"] == "tool_use"
    assert tool_start["name"] == "get_weather"
    assert tool_start["input"] == {}
    assert all(p["index"] == 1 for p in payloads[6:10])
    partial = "".join(p["delta"]["partial_json"] for p in payloads[7:9])
    assert json.loads(partial) == {"city": "Tokyo", "unit": "c"}
    assert payloads[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert payloads[-2]["usage"] == {"output_tokens": 9}


def test_anthropic_count_tokens(server: ScriptedModelServer, client: httpx.Client) -> None:
    body = {"model": "c", "system": "two words", "messages": [{"role": "user", "content": "a b c"}]}
    server.script(Reply(text="not consumed"))
    response = client.post(f"{server.anthropic_base_url}/v1/messages/count_tokens", json=body)
    assert response.json() == {"input_tokens": 5}
    reply = client.post(f"{server.anthropic_base_url}/v1/messages", json=anthropic_body()).json()
    assert reply["content"][0]["text"] == "not consumed"


# ----------------------------------------------------------------------------- Gemini


def gemini_body() -> dict[str, Any]:
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "old"}]},
            {"role": "model", "parts": [{"text": "reply"}]},
            {"role": "user", "parts": [{"text": "ciao"}]},
        ]
    }


def test_gemini_generate_content(server: ScriptedModelServer, client: httpx.Client) -> None:
    url = f"{server.gemini_base_url}/v1beta/models/gemini-test:generateContent"
    body = client.post(url, json=gemini_body()).json()
    candidate = body["candidates"][0]
    assert candidate["content"] == {"parts": [{"text": "You said: ciao"}], "role": "model"}
    assert candidate["finishReason"] == "STOP"
    assert body["usageMetadata"] == {
        "promptTokenCount": 11,
        "candidatesTokenCount": 7,
        "totalTokenCount": 18,
    }
    assert body["modelVersion"] == "gemini-test"


def test_gemini_function_call(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(tool_calls=(WEATHER,)))
    url = f"{server.gemini_base_url}/v1beta/models/gemini-test:generateContent"
    parts = client.post(url, json=gemini_body()).json()["candidates"][0]["content"]["parts"]
    assert parts == [{"functionCall": {"name": "get_weather", "args": {"city": "Tokyo", "unit": "c"}}}]


def test_gemini_stream_sse(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="abcdef", chunks=3))
    url = f"{server.gemini_base_url}/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    response = client.post(url, json=gemini_body())
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("\r\n\r\n")
    chunks = sse_json(response)
    texts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks]
    assert texts == ["ab", "cd", "ef"]
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert all("usageMetadata" not in c for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 18
    assert server.requests[-1].query == "alt=sse"


def test_gemini_stream_without_sse_is_json_array(server: ScriptedModelServer, client: httpx.Client) -> None:
    url = f"{server.gemini_base_url}/v1beta/models/gemini-test:streamGenerateContent"
    chunks = client.post(url, json=gemini_body()).json()
    assert isinstance(chunks, list)
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text == "You said: ciao"


def test_gemini_count_tokens_consumes_no_reply(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="kept for the model call"))
    url = f"{server.gemini_base_url}/v1beta/models/gemini-test:countTokens"
    assert client.post(url, json=gemini_body()).json() == {"totalTokens": 3}
    generated = client.post(
        f"{server.gemini_base_url}/v1beta/models/gemini-test:generateContent", json=gemini_body()
    )
    assert generated.json()["candidates"][0]["content"]["parts"] == [{"text": "kept for the model call"}]


@pytest.mark.parametrize("version", ["v1beta", "v1alpha"])
def test_gemini_model_list_and_lookup(
    server: ScriptedModelServer, client: httpx.Client, version: str
) -> None:
    listed = client.get(f"{server.gemini_base_url}/{version}/models").json()
    assert [m["name"] for m in listed["models"]] == ["models/gemini-2.5-flash", "models/gemini-2.5-pro"]
    one = client.get(f"{server.gemini_base_url}/{version}/models/gemini-test").json()
    assert one["name"] == "models/gemini-test"
    assert "generateContent" in one["supportedGenerationMethods"]
    assert server.requests[-1].method == "GET"


def test_gemini_post_to_a_model_list_is_not_found(server: ScriptedModelServer, client: httpx.Client) -> None:
    assert client.post(f"{server.gemini_base_url}/v1beta/models", json={}).status_code == 404
    assert client.get(f"{server.gemini_base_url}/v1beta/models/x:countTokens").status_code == 404
    # /v1/models is Gemini's only for Google's SDKs (they send x-goog-api-key)
    assert client.get(f"{server.openai_base_url}/models").status_code == 404
    google = client.get(f"{server.openai_base_url}/models", headers={"x-goog-api-key": "k"})
    assert len(google.json()["models"]) == 2


# ----------------------------------------------------------------------------- scripting


def test_script_is_fifo_across_protocols(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="one"), Reply(text="two"))
    server.script(Reply(text="three"))
    first = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).json()
    second = client.post(f"{server.anthropic_base_url}/v1/messages", json=anthropic_body()).json()
    third = client.post(f"{server.openai_base_url}/responses", json={"input": "x"}).json()
    fourth = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).json()
    assert first["choices"][0]["message"]["content"] == "one"
    assert second["content"][0]["text"] == "two"
    assert third["output"][0]["content"][0]["text"] == "three"
    assert fourth["choices"][0]["message"]["content"] == "You said: second question"


def test_custom_tokens_and_finish_reason(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="x", input_tokens=3, output_tokens=4, finish_reason="length"))
    body = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


@pytest.mark.parametrize(
    ("path", "body", "check"),
    [
        (
            "/v1/chat/completions",
            chat_body(),
            lambda e: e["error"]["message"] == "slow down" and e["error"]["type"] == "rate_limit_error",
        ),
        (
            "/v1/responses",
            {"input": "x", "stream": True},
            lambda e: e["error"]["message"] == "slow down",
        ),
        (
            "/v1/messages",
            anthropic_body(),
            lambda e: (
                e["type"] == "error" and e["error"] == {"type": "rate_limit_error", "message": "slow down"}
            ),
        ),
        (
            "/v1beta/models/g:generateContent",
            gemini_body(),
            lambda e: e["error"] == {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"},
        ),
    ],
)
def test_error_status_uses_protocol_shape(
    server: ScriptedModelServer, client: httpx.Client, path: str, body: Any, check: Any
) -> None:
    server.script(Reply(status=429, text="slow down"))
    response = client.post(server.base_url + path, json=body)
    assert response.status_code == 429
    assert response.headers["content-type"] == "application/json"
    assert check(response.json())


def test_unknown_path_is_404_and_keeps_script(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="kept"))
    response = client.post(f"{server.base_url}/v1/embeddings", json={"input": "x"})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
    assert client.get(f"{server.base_url}/v1/chat/completions").status_code == 404
    body = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).json()
    assert body["choices"][0]["message"]["content"] == "kept"


def test_invalid_json_body_is_400(server: ScriptedModelServer, client: httpx.Client) -> None:
    response = client.post(f"{server.anthropic_base_url}/v1/messages", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["type"] == "error"


def test_truncated_stream(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="never finished", truncate_stream_after=2))
    received: list[str] = []
    url = f"{server.openai_base_url}/chat/completions"
    with client.stream("POST", url, json=chat_body(stream=True)) as response:
        lines = response.iter_lines()
        with pytest.raises(httpx.RemoteProtocolError):
            received.extend(lines)
    data = [line for line in received if line.startswith("data: ")]
    assert len(data) == 2
    assert "data: [DONE]" not in data
    # The server is still healthy afterwards.
    assert client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).is_success


def test_raw_body(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(raw_body=b"{broken", status=200))
    response = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body())
    assert response.status_code == 200
    assert response.content == b"{broken"


def test_delay(server: ScriptedModelServer, client: httpx.Client) -> None:
    server.script(Reply(text="late", delay=0.05))
    started = time.perf_counter()
    client.post(f"{server.openai_base_url}/chat/completions", json=chat_body())
    assert time.perf_counter() - started >= 0.05


def test_keep_alive_reuses_one_connection(server: ScriptedModelServer, client: httpx.Client) -> None:
    url = f"{server.openai_base_url}/chat/completions"
    addresses = []
    for body in (chat_body(), chat_body(stream=True), chat_body()):
        response = client.post(url, json=body)
        assert response.is_success
        addresses.append(response.extensions["network_stream"].get_extra_info("client_addr"))
    assert addresses[0] == addresses[1] == addresses[2]
    assert response.http_version == "HTTP/1.1"


def test_requests_are_recorded(server: ScriptedModelServer, client: httpx.Client) -> None:
    client.post(
        f"{server.anthropic_base_url}/v1/messages?beta=true",
        json=anthropic_body(),
        headers={"X-Api-Key": "secret", "Anthropic-Version": "2023-06-01"},
    )
    (request,) = server.requests
    assert isinstance(request, RecordedRequest)
    assert request.method == "POST"
    assert request.path == "/v1/messages"
    assert request.query == "beta=true"
    assert request.headers["x-api-key"] == "secret"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == anthropic_body()
    assert request.json == anthropic_body()
    assert server.last_json() == anthropic_body()


def test_chunked_request_body(server: ScriptedModelServer, client: httpx.Client) -> None:
    payload = json.dumps(chat_body()).encode()

    def pieces() -> Iterator[bytes]:
        yield payload[:10]
        yield payload[10:]

    response = client.post(f"{server.openai_base_url}/chat/completions", content=pieces())
    assert server.requests[-1].headers["transfer-encoding"] == "chunked"
    assert response.json()["choices"][0]["message"]["content"] == "You said: second question"


def test_clear_and_last_json(server: ScriptedModelServer, client: httpx.Client) -> None:
    with pytest.raises(LookupError):
        server.last_json()
    server.script(Reply(text="dropped"))
    client.post(f"{server.openai_base_url}/chat/completions", content=b"[1]")
    with pytest.raises(ValueError, match="not a JSON object"):
        server.last_json()
    server.clear()
    assert server.requests == []
    body = client.post(f"{server.openai_base_url}/chat/completions", json=chat_body()).json()
    assert body["choices"][0]["message"]["content"] == "You said: second question"


def test_lifecycle() -> None:
    server = ScriptedModelServer()
    with pytest.raises(RuntimeError):
        _ = server.base_url
    assert server.start() is server
    assert server.start() is server
    host_port = server.base_url.removeprefix("http://")
    assert host_port.startswith("127.0.0.1:")
    assert int(host_port.split(":")[1]) > 0
    assert server.openai_base_url == server.base_url + "/v1"
    assert server.anthropic_base_url == server.gemini_base_url == server.base_url
    url = server.openai_base_url
    with httpx.Client() as http:
        assert http.post(f"{url}/chat/completions", json=chat_body()).is_success
        server.stop()
        server.stop()
        with pytest.raises(httpx.TransportError):
            http.post(f"{url}/chat/completions", json=chat_body())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("status", [200, 429])
def test_reply_headers_are_sent_as_scripted(
    server: ScriptedModelServer, client: httpx.Client, stream: bool, status: int
) -> None:
    headers = (("x-request-id", "req_1 A"), ("anthropic-ratelimit-requests-remaining", "4"))
    server.script(Reply(text="hi", status=status, headers=headers))
    response = client.post(server.openai_base_url + "/chat/completions", json=chat_body(stream=stream))
    assert response.status_code == status
    assert [
        (k, v)
        for k, v in response.headers.raw
        if k.lower() in {b"x-request-id", b"anthropic-ratelimit-requests-remaining"}
    ] == [
        (b"x-request-id", b"req_1 A"),
        (b"anthropic-ratelimit-requests-remaining", b"4"),
    ]
