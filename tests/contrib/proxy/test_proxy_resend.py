"""Through the proxy, an upstream validation rejection (400/422) of a request memtap changed
is answered by sending the client's own bytes once more: the client gets the answer it
would have got without memtap, streamed or not, and the turn is stored once. Other errors,
and rejections of requests memtap left alone, are relayed as they came."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from proxy_support import API_KEY, needs_anthropic

import memtap
from memtap.testing.server import Reply, ScriptedModelServer
from memtap_proxy import ProxyThread

HEADERS = {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}


def chat_body(text: str, **extra: object) -> bytes:
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": text}], **extra}
    return json.dumps(body, separators=(", ", ": ")).encode()  # not the proxy's own spacing


def post(http: httpx.Client, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return http.post("/v1/chat/completions", content=body, headers={**HEADERS, **(headers or {})})


def history(mem: memtap.Memory, session: str = "default") -> list[str]:
    return [m.content for m in mem.history(session)]


def test_a_rejected_injected_request_is_resent_with_the_clients_own_bytes(
    http: httpx.Client, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    post(http, chat_body("my name is Ada"))
    upstream.script(Reply(status=400, text="messages[1]: scripted rejection"))
    mine = chat_body("what is my name?")
    answer = post(http, mine)
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "You said: what is my name?"
    rejected, resent = upstream.requests[-2:]
    assert len(rejected.json["messages"]) == 3  # memtap's history was on the rejected one
    assert resent.body == mine  # byte for byte what the client sent
    assert history(mem) == [
        "my name is Ada",
        "You said: my name is Ada",
        "what is my name?",
        "You said: what is my name?",
    ]


def test_a_rejected_streamed_request_is_resent_and_streamed(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "my name is Ada"}])
    upstream.script(Reply(status=400, text="scripted rejection"), Reply(text="streamed after all", chunks=3))
    chunks = list(
        client.chat.completions.create(
            model="gpt-x", messages=[{"role": "user", "content": "stream it"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed after all"
    rejected, resent = upstream.requests[-2:]
    assert rejected.json["stream_options"] == {"include_usage": True}
    assert "stream_options" not in resent.json and len(resent.json["messages"]) == 1
    assert history(mem)[-2:] == ["stream it", "streamed after all"]
    (ex,) = [e for e in mem.store.exchanges() if e.stream]
    assert ex.status == "ok"


@needs_anthropic
def test_a_rejected_anthropic_stream_is_resent(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url, api_key=API_KEY, max_retries=0)
    client.messages.create(
        model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "I am Ada"}]
    )
    upstream.script(Reply(status=400, text="`tool_use` ids were found without `tool_result` blocks"))
    with client.messages.stream(
        model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "who am I?"}]
    ) as stream:
        assert "".join(stream.text_stream) == "You said: who am I?"
    assert upstream.requests[-1].json["messages"] == [{"role": "user", "content": "who am I?"}]
    assert history(mem)[-2:] == ["who am I?", "You said: who am I?"]


@pytest.mark.parametrize("status", [401, 403, 429, 500])
def test_other_errors_are_relayed_as_they_came(
    http: httpx.Client, upstream: ScriptedModelServer, mem: memtap.Memory, status: int
) -> None:
    post(http, chat_body("my name is Ada"))
    upstream.script(Reply(status=status, text="scripted error"))
    before = len(upstream.requests)
    answer = post(http, chat_body("what is my name?"))
    assert answer.status_code == status and "scripted error" in answer.text
    assert len(upstream.requests) - before == 1
    assert history(mem) == ["my name is Ada", "You said: my name is Ada"]


def test_a_rejection_of_a_request_memtap_left_alone_is_relayed(
    http: httpx.Client, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    upstream.script(Reply(status=400, text="the client's own mistake"))
    answer = post(http, chat_body("hello"), {"x-memtap-entity": "nobody", "x-memtap-session": "fresh"})
    assert answer.status_code == 400 and "the client's own mistake" in answer.text
    assert len(upstream.requests) == 1
