"""The upstream's response headers reach the client as the upstream sent them: request ids,
rate limits, processing times, retry hints, for JSON answers, SSE streams and errors, on
both the OpenAI and the Anthropic routes. Apps and SDKs read them (the openai SDK's
``x-request-id``, its retries on ``retry-after``, rate-limit dashboards); a proxy that drops
or rewrites them breaks those apps without failing a call."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
from proxy_raw_upstream import END, RawUpstream, Seen, chunk, head
from proxy_support import make_memory, needs_anthropic

from memtap.testing.server import Reply, ScriptedModelServer
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

#: What providers send beside the body (values as an upstream would, mixed case kept).
UPSTREAM_HEADERS = [
    ("x-request-id", "req_8f3a2c"),
    ("openai-processing-ms", "412"),
    ("openai-organization", "org-test"),
    ("x-ratelimit-limit-requests", "10000"),
    ("x-ratelimit-remaining-requests", "9999"),
    ("x-ratelimit-reset-tokens", "6ms"),
    ("request-id", "req_011CS"),
    ("anthropic-ratelimit-requests-remaining", "49"),
    ("retry-after", "3"),
    ("x-custom-Trace", "Abc-123"),
]

CHAT_ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "pong"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
MESSAGE_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "pong"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
CHAT_EVENTS = [
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":"po"},"finish_reason":null}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":"ng"},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def _answer(body: bytes, content_type: str, status: int = 200) -> list[Any]:
    headers = [("content-type", content_type), ("content-length", str(len(body))), *UPSTREAM_HEADERS]
    return [head(status, headers) + body]


def _stream(events: list[bytes]) -> list[Any]:
    headers = [("content-type", "text/event-stream"), ("transfer-encoding", "chunked"), *UPSTREAM_HEADERS]
    return [head(200, headers), *(chunk(e) for e in events), END]


def _script(seen: Seen) -> list[Any]:
    body = seen.json
    if seen.target.endswith("/v1/messages"):
        return _answer(json.dumps(MESSAGE_ANSWER).encode(), "application/json")
    if body.get("stream"):
        return _stream(CHAT_EVENTS)
    if body.get("messages", [{}])[-1].get("content") == "fail":
        error = {"error": {"message": "slow down", "type": "rate_limit_error"}}
        return _answer(json.dumps(error).encode(), "application/json", status=429)
    return _answer(json.dumps(CHAT_ANSWER).encode(), "application/json")


@pytest.fixture
def proxied():
    memory = make_memory()
    with RawUpstream(script=_script) as upstream:
        url = upstream.url
        config = ProxyConfig(openai_upstream=url, anthropic_upstream=url, session_id="default")
        with ProxyThread(Proxy(config, memory)) as thread:
            yield thread
    memory.close()


def _assert_passed(headers: httpx.Headers) -> None:
    for name, value in UPSTREAM_HEADERS:
        assert headers.get(name) == value, f"{name}: {headers.get(name)!r}, upstream sent {value!r}"


def test_json_answer_keeps_the_upstream_headers(proxied: ProxyThread) -> None:
    client = openai.OpenAI(base_url=proxied.url + "/v1", api_key="sk-test", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "ping"}]
    )
    _assert_passed(raw.headers)
    assert raw.parse().choices[0].message.content == "pong"
    assert raw.request_id == "req_8f3a2c"  # what the SDK reports to the app


def test_streamed_answer_keeps_the_upstream_headers(proxied: ProxyThread) -> None:
    client = openai.OpenAI(base_url=proxied.url + "/v1", api_key="sk-test", max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=[{"role": "user", "content": "ping"}], stream=True
    ) as response:
        _assert_passed(response.headers)
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    assert text == "pong"


def test_error_answer_keeps_the_upstream_headers(proxied: ProxyThread) -> None:
    client = openai.OpenAI(base_url=proxied.url + "/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "fail"}])
    _assert_passed(caught.value.response.headers)


def test_anthropic_answer_keeps_the_upstream_headers(proxied: ProxyThread) -> None:
    client = anthropic.Anthropic(base_url=proxied.url, api_key="sk-ant-test", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "ping"}]
    )
    _assert_passed(raw.headers)
    assert raw.parse().content[0].text == "pong"  # type: ignore[union-attr]


# -------------------------------------------------- through the scripted server (memtap.testing)

#: Provider headers with values a re-encoding proxy would change (spaces, commas, case, a
#: timestamp, a long id): each must reach the client as these exact bytes.
PROVIDER_HEADERS = (
    ("x-request-id", "req_01HZ9ab, Trace=XyZ 42"),
    ("x-ratelimit-limit-requests", "10000"),
    ("x-ratelimit-remaining-tokens", "149984"),
    ("x-ratelimit-reset-requests", "1m0.5s"),
    ("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy"),
    ("anthropic-ratelimit-requests-remaining", "49"),
    ("anthropic-ratelimit-tokens-reset", "2026-12-06T01:20:00Z"),
    ("x-Custom-Mixed", "  keep  spacing;a=1 "),
)


def _exactly_passed(raw: list[tuple[bytes, bytes]]) -> None:
    """Each provider header arrived once, its value byte for byte (names compare without case,
    as HTTP defines them)."""
    got: dict[bytes, list[bytes]] = {}
    for name, value in raw:
        got.setdefault(name.lower(), []).append(value)
    for name, value in PROVIDER_HEADERS:
        # A header value's outer whitespace is not part of it (RFC 9110 §5.5).
        assert got.get(name.lower().encode()) == [value.strip().encode()], (
            f"{name}: client got {got.get(name.lower().encode())!r}, upstream sent {value!r}"
        )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_sdk_gets_the_upstream_headers_unchanged(
    upstream: ScriptedModelServer, proxy: ProxyThread, stream: bool
) -> None:
    upstream.script(Reply(text="pong", headers=PROVIDER_HEADERS))
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
    messages: Any = [{"role": "user", "content": "ping"}]
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=messages, stream=stream
    ) as response:
        _exactly_passed(response.http_response.headers.raw)
        assert response.request_id == "req_01HZ9ab, Trace=XyZ 42"  # what the SDK tells the app
        if stream:
            text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
        else:
            text = response.parse().choices[0].message.content or ""
    assert text == "pong"


@needs_anthropic
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_anthropic_sdk_gets_the_upstream_headers_unchanged(
    upstream: ScriptedModelServer, proxy: ProxyThread, stream: bool
) -> None:
    upstream.script(Reply(text="pong", headers=PROVIDER_HEADERS))
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", max_retries=0)
    messages: Any = [{"role": "user", "content": "ping"}]
    with client.messages.with_streaming_response.create(
        model="m", max_tokens=10, messages=messages, stream=stream
    ) as response:
        _exactly_passed(response.http_response.headers.raw)
        assert response.request_id == "req_011CSHoEeqs5C35K2UUqR7Fy"
        if stream:
            text = "".join(
                e.delta.text
                for e in response.parse()
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            )
        else:
            text = response.parse().content[0].text  # type: ignore[union-attr]
    assert text == "pong"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_raw_client_gets_the_upstream_header_bytes(
    upstream: ScriptedModelServer, http: httpx.Client, path: str, stream: bool
) -> None:
    """Below any SDK: the header lines as the wire carries them."""
    upstream.script(Reply(text="pong", headers=PROVIDER_HEADERS))
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "ping"}],
        "stream": stream,
    }
    with http.stream("POST", path, json=body, headers={"x-api-key": "sk-ant-test"}) as response:
        response.read()
    assert response.status_code == 200
    _exactly_passed(response.headers.raw)
