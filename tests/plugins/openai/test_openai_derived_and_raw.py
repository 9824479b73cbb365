"""Every way the openai SDK offers to call a registered client is tapped by the same Memory:
clients derived with ``with_options()`` / ``copy()`` (chained too, sync and async), the
raw-response views (``with_raw_response``, ``with_streaming_response``, per resource and
per client) streamed or not, read through ``parse()`` — what LangChain does."""

from __future__ import annotations

import asyncio
import logging

import openai
import pytest
from openai_support import API_KEY, user

import memtap
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply


def turns(mem, session):
    return [m.content for m in mem.history(session)]


def sent_contents(server):
    return [m["content"] for m in server.last_json()["messages"]]


DERIVE = {
    "with_options": lambda c: c.with_options(timeout=30),
    "copy": lambda c: c.copy(max_retries=0),
    "chained": lambda c: c.with_options(timeout=30).with_options(max_retries=0),
}


@pytest.mark.parametrize("how", sorted(DERIVE))
def test_a_derived_client_is_injected_and_captured(client, server, mem, how):
    derived = DERIVE[how](client)
    assert derived is not client
    with mem.scope(entity_id="d", session_id=f"derived-{how}"):
        client.chat.completions.create(model="m", messages=[user("on the parent")])
        derived.chat.completions.create(model="m", messages=[user("on the derived one")])
        derived.responses.create(model="m", input="through responses")
    sent = [m["content"] for m in server.requests[-2].json["messages"]]
    assert sent == ["on the parent", "You said: on the parent", "on the derived one"]
    assert turns(mem, f"derived-{how}") == [
        "on the parent",
        "You said: on the parent",
        "on the derived one",
        "You said: on the derived one",
        "through responses",
        "You said: through responses",
    ]


def test_a_derived_async_client_is_tapped(aclient, server, mem):
    async def main():
        derived = aclient.with_options(timeout=30)
        with mem.scope(session_id="derived-async"):
            await aclient.chat.completions.create(model="m", messages=[user("parent")])
            await derived.chat.completions.create(model="m", messages=[user("derived")])

    asyncio.run(main())
    assert sent_contents(server) == ["parent", "You said: parent", "derived"]
    assert turns(mem, "derived-async")[-1] == "You said: derived"


def test_unregistering_the_parent_restores_its_derived_clients(client, server, mem):
    derived = client.with_options(timeout=30)
    mem.unregister(client)
    assert "create" not in vars(derived.chat.completions)
    with mem.scope(session_id="derived-off"):
        derived.chat.completions.create(model="m", messages=[user("untapped")])
        client.with_options(timeout=5).chat.completions.create(model="m", messages=[user("untapped too")])
    assert mem.history("derived-off") == []


def test_derived_clients_are_not_kept_alive_by_memtap(client, mem):
    before = len(list(mem.registered()))
    for _ in range(20):
        client.with_options(timeout=30)
    collect_garbage()
    assert len(list(mem.registered())) == before


def test_close_restores_derived_clients(server, store):
    mem = memtap.Memory(store, plugins=[__import__("memtap_openai")], entry_points=False)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    derived = client.with_options(timeout=30)
    mem.close()
    assert "create" not in vars(derived.chat.completions)
    assert "_prepare_options" not in vars(derived)


def test_a_derived_client_cannot_be_registered_with_another_memory(client, server, store):
    derived = client.with_options(timeout=30)
    other = memtap.Memory(store, plugins=[__import__("memtap_openai")], entry_points=False)
    with pytest.raises(ValueError, match="already registered"):
        other.register(derived)
    other.close()


# -- raw responses --------------------------------------------------------------------------


def chat_text(chunks):
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_raw_streamed_chat_is_captured_like_any_stream(client, server, mem):
    server.script(Reply(text="a raw streamed answer", chunks=4))
    with mem.scope(session_id="raw-stream"):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[user("stream it raw")], stream=True
        )
        assert raw.headers.get("content-type", "").startswith("text/event-stream")
        chunks = list(raw.parse())
    assert chat_text(chunks) == "a raw streamed answer"
    # memtap asked for usage: the usage-only chunk it added is not shown to the caller.
    assert all(c.choices for c in chunks)
    assert turns(mem, "raw-stream") == ["stream it raw", "a raw streamed answer"]
    (ex,) = mem.store.exchanges(session_id="raw-stream")
    assert ex.stream and ex.status == "ok" and ex.usage.output_tokens == 7


def test_with_streaming_response_is_captured_streamed_or_not(client, server, mem):
    with mem.scope(session_id="streaming-response"):
        with client.chat.completions.with_streaming_response.create(
            model="m", messages=[user("whole answer")]
        ) as response:
            assert response.parse().choices[0].message.content == "You said: whole answer"
        with client.chat.completions.with_streaming_response.create(
            model="m", messages=[user("streamed answer")], stream=True
        ) as response:
            assert chat_text(response.parse()) == "You said: streamed answer"
    assert sent_contents(server)[:2] == ["whole answer", "You said: whole answer"]
    assert turns(mem, "streaming-response") == [
        "whole answer",
        "You said: whole answer",
        "streamed answer",
        "You said: streamed answer",
    ]


def test_client_level_raw_views_and_responses_api_are_captured(client, server, mem):
    early = client.with_raw_response  # built before register: rebuilt around the wrappers
    mem.unregister(client)
    mem.register(client)
    assert early is not client.with_raw_response
    with mem.scope(session_id="client-raw"):
        raw = client.with_raw_response.responses.create(model="m", input="raw responses", stream=True)
        text = "".join(e.delta for e in raw.parse() if e.type == "response.output_text.delta")
        raw = client.with_raw_response.chat.completions.create(model="m", messages=[user("raw chat")])
        raw.parse()
    assert text == "You said: raw responses"
    assert turns(mem, "client-raw") == [
        "raw responses",
        "You said: raw responses",
        "raw chat",
        "You said: raw chat",
    ]


def test_async_raw_streams_are_captured(aclient, server, mem):
    async def main():
        with mem.scope(session_id="raw-async"):
            raw = await aclient.chat.completions.with_raw_response.create(
                model="m", messages=[user("async raw")], stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in raw.parse() if c.choices])
            async with aclient.chat.completions.with_streaming_response.create(
                model="m", messages=[user("async streaming")], stream=True
            ) as response:
                stream = await response.parse()
                text2 = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            async with aclient.chat.completions.with_streaming_response.create(
                model="m", messages=[user("async whole")]
            ) as response:
                whole = (await response.parse()).choices[0].message.content
        return text, text2, whole

    assert asyncio.run(main()) == (
        "You said: async raw",
        "You said: async streaming",
        "You said: async whole",
    )
    assert turns(mem, "raw-async") == [
        "async raw",
        "You said: async raw",
        "async streaming",
        "You said: async streaming",
        "async whole",
        "You said: async whole",
    ]


def test_a_raw_stream_never_parsed_is_not_stored_and_says_why(client, server, mem, caplog):
    caplog.set_level(logging.WARNING, logger="memtap")
    with mem.scope(session_id="raw-unread"):
        with client.chat.completions.with_streaming_response.create(
            model="m", messages=[user("read by hand")], stream=True
        ) as response:
            lines = [line for line in response.iter_lines() if line]
        del response
        collect_garbage()
    assert any("You said" in line for line in lines)
    assert mem.history("raw-unread") == []
    assert "parse()" in caplog.text
