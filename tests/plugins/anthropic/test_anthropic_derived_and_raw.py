"""anthropic clients derived from a registered one (``with_options()`` / ``copy()``), and
the raw-response views streamed or not (``with_raw_response`` is how LangChain's
ChatAnthropic calls, streamed turns included), are tapped by the same Memory."""

from __future__ import annotations

import asyncio

import pytest

from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply


def user(text):
    return [{"role": "user", "content": text}]


def turns(mem, session):
    return [m.content for m in mem.history(session)]


def text_of(events):
    return "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


@pytest.mark.parametrize("derive", ["with_options", "copy"])
def test_stream_helper_and_beta_on_a_derived_client(client, server, mem, derive):
    derived = getattr(client, derive)(timeout=30)
    with mem.scope(session_id=f"derived-{derive}"):
        client.messages.create(model="m", max_tokens=32, messages=user("first"))
        with derived.messages.stream(model="m", max_tokens=32, messages=user("streamed helper")) as s:
            assert "".join(s.text_stream) == "You said: streamed helper"
        derived.beta.messages.create(model="m", max_tokens=32, messages=user("beta"))
    sent = server.last_json()["messages"]
    assert [m["content"] for m in sent][:2] == ["first", "You said: first"]
    assert turns(mem, f"derived-{derive}") == [
        "first",
        "You said: first",
        "streamed helper",
        "You said: streamed helper",
        "beta",
        "You said: beta",
    ]


def test_a_derived_async_client_is_tapped(aclient, server, mem):
    async def main():
        derived = aclient.with_options(timeout=30)
        with mem.scope(session_id="derived-async"):
            await derived.messages.create(model="m", max_tokens=32, messages=user("async derived"))

    asyncio.run(main())
    assert turns(mem, "derived-async") == ["async derived", "You said: async derived"]


def test_derived_clients_are_held_weakly(client, mem):
    before = len(list(mem.registered()))
    for _ in range(10):
        client.with_options(timeout=30)
    collect_garbage()
    assert len(list(mem.registered())) == before


def test_raw_streamed_messages_are_captured(client, server, mem):
    server.script(Reply(text="raw and streamed", chunks=3))
    with mem.scope(session_id="raw-stream"):
        raw = client.messages.with_raw_response.create(
            model="m", max_tokens=32, messages=user("stream raw"), stream=True
        )
        assert text_of(raw.parse()) == "raw and streamed"
        assert raw.parse() is raw.parse()  # parse() is cached: observed once
    assert turns(mem, "raw-stream") == ["stream raw", "raw and streamed"]
    (ex,) = mem.store.exchanges(session_id="raw-stream")
    assert ex.stream and ex.status == "ok" and (ex.usage.input_tokens, ex.usage.output_tokens) == (11, 7)


def test_with_streaming_response_is_captured_streamed_or_not(client, server, mem):
    with mem.scope(session_id="streaming-response"):
        with client.messages.with_streaming_response.create(
            model="m", max_tokens=32, messages=user("whole")
        ) as response:
            assert response.json()["content"][0]["text"] == "You said: whole"
        with client.beta.messages.with_streaming_response.create(
            model="m", max_tokens=32, messages=user("streamed"), stream=True
        ) as response:
            assert text_of(response.parse()) == "You said: streamed"
    assert turns(mem, "streaming-response") == ["whole", "You said: whole", "streamed", "You said: streamed"]


def test_an_abandoned_raw_stream_is_captured_as_partial(client, server, mem):
    server.script(Reply(text="a b c d e f", chunks=6))
    with mem.scope(session_id="raw-break"):
        raw = client.messages.with_raw_response.create(
            model="m", max_tokens=32, messages=user("break it"), stream=True
        )
        for _event in raw.parse():
            break
        del raw, _event
        collect_garbage()
    assert mem.flush(5)
    (ex,) = mem.store.exchanges(session_id="raw-break")
    assert ex.status == "partial"
