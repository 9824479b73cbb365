"""Real SDK clients pointed at the proxy work unchanged, get history, are captured."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from proxy_support import API_KEY, needs_anthropic, settle

import memtap
from memtap.testing.server import Reply, ScriptedModelServer
from memtap_proxy import ProxyThread


@pytest.fixture
def oai(proxy: ProxyThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)


def texts(mem: memtap.Memory, session: str = "default") -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in mem.history(session)]


def test_chat_json_then_history_is_injected(oai, upstream: ScriptedModelServer, mem) -> None:
    upstream.script(Reply(text="Hello Alice"))
    r = oai.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "I am Alice"}])
    assert r.choices[0].message.content == "Hello Alice"
    first = upstream.requests[-1]
    assert first.body == b'{"model":"gpt-x","messages":[{"role":"user","content":"I am Alice"}]}'
    assert first.headers["authorization"] == f"Bearer {API_KEY}"
    oai.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "who am I?"}])
    sent = upstream.last_json()["messages"]
    assert [m["content"] for m in sent] == ["I am Alice", "Hello Alice", "who am I?"]
    assert texts(mem) == [
        ("user", "I am Alice"),
        ("assistant", "Hello Alice"),
        ("user", "who am I?"),
        ("assistant", "You said: who am I?"),
    ]


def test_chat_stream_hides_the_usage_chunk_it_asked_for(oai, upstream, mem) -> None:
    oai.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hello"}])
    settle(mem, 1)  # the next request gets it as history: memtap changes it, and asks for usage
    upstream.script(Reply(text="streamed answer", chunks=4, input_tokens=5, output_tokens=3))
    stream = oai.chat.completions.create(
        model="gpt-x", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    assert all(c.choices for c in chunks)  # the usage-only chunk is not shown
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "streamed answer"
    assert upstream.last_json()["stream_options"] == {"include_usage": True}
    assert texts(mem)[-1] == ("assistant", "streamed answer")


def test_chat_stream_asks_for_no_usage_when_nothing_is_injected(oai, upstream, mem) -> None:
    upstream.script(Reply(text="streamed answer", chunks=4))
    chunks = list(
        oai.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "hi"}], stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "streamed answer"
    assert "stream_options" not in upstream.last_json()  # the client's bytes, unchanged
    settle(mem, 1)
    assert texts(mem)[-1] == ("assistant", "streamed answer")


def test_chat_stream_keeps_usage_the_client_asked_for(oai, upstream, mem) -> None:
    stream = oai.chat.completions.create(
        model="gpt-x",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and not chunks[-1].choices


def test_responses_json_and_stream(oai, upstream, mem) -> None:
    r = oai.responses.create(model="gpt-x", input="first", instructions="Be brief.")
    assert r.output_text == "You said: first"
    assert upstream.requests[-1].body == b'{"model":"gpt-x","input":"first","instructions":"Be brief."}'
    with oai.responses.stream(model="gpt-x", input="second") as stream:
        final = stream.get_final_response()
    assert final.output_text == "You said: second"
    sent = upstream.last_json()
    assert sent["input"][:2] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "You said: first"},
    ]
    assert texts(mem)[-1] == ("assistant", "You said: second")


def test_async_openai_client(proxy: ProxyThread, upstream, mem) -> None:
    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
        r = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "async"}])
        assert r.choices[0].message.content == "You said: async"
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "async stream"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "You said: async stream"
        await client.close()

    asyncio.run(main())
    assert len(mem.history("default")) == 4


def test_attribution_headers_keep_entities_apart(proxy: ProxyThread, upstream, mem) -> None:
    def client(entity: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=proxy.url + "/v1",
            api_key=API_KEY,
            max_retries=0,
            default_headers={"x-memtap-entity": entity, "x-memtap-session": f"s-{entity}"},
        )

    client("alice").chat.completions.create(model="m", messages=[{"role": "user", "content": "alice secret"}])
    client("bob").chat.completions.create(model="m", messages=[{"role": "user", "content": "bob here"}])
    sent = upstream.last_json()["messages"]
    assert all("alice" not in m["content"] for m in sent)
    assert "x-memtap-entity" not in upstream.requests[-1].headers
    assert mem.history("s-alice", entity_id="alice")[0].content == "alice secret"
    assert mem.history("s-bob", entity_id="alice") == []


@needs_anthropic
def test_anthropic_json_and_stream(proxy: ProxyThread, upstream, mem) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url, api_key=API_KEY, max_retries=0)
    upstream.script(Reply(text="Noted, Tokyo."))
    msg = client.messages.create(
        model="claude-x",
        max_tokens=100,
        system=[{"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "I live in Tokyo"}],
    )
    assert msg.content[0].text == "Noted, Tokyo."
    headers = upstream.requests[-1].headers
    assert API_KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert "anthropic-version" in upstream.requests[-1].headers
    with client.messages.stream(
        model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "where do I live?"}]
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == "You said: where do I live?"
    sent = upstream.last_json()
    assert sent["messages"][0] == {"role": "user", "content": "I live in Tokyo"}
    assert texts(mem)[-1] == ("assistant", "You said: where do I live?")
    count = client.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "a b c"}])
    assert count.input_tokens >= 1
    assert upstream.requests[-1].path == "/v1/messages/count_tokens"
    assert json.loads(upstream.requests[-1].body) == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "a b c"}],
    }


@needs_anthropic
def test_claude_code_url_prefix_is_stripped(proxy: ProxyThread, upstream, mem) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url + "/claude-code", api_key=API_KEY, max_retries=0)
    msg = client.messages.create(model="c", max_tokens=10, messages=[{"role": "user", "content": "hey"}])
    assert msg.content[0].text == "You said: hey"
    assert upstream.requests[-1].path == "/v1/messages"
