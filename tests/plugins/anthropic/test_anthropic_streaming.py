"""Streams with the real anthropic SDK: ``create(stream=True)``, the ``messages.stream(...)``
helper (sync and async, ``messages`` and ``beta.messages``): events reach the caller
unchanged and each call is captured exactly once."""

from __future__ import annotations

import asyncio

import anthropic
import pytest

from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply, ToolCallSpec


def user(text):
    return {"role": "user", "content": text}


ARGS = {"model": "claude-x", "max_tokens": 100}


def exchanges(mem, session):
    assert mem.flush(timeout=10)
    return list(mem.store.exchanges(session_id=session))


def test_events_reach_the_caller_exactly_as_from_a_bare_client(client, bare, server, mem):
    server.script(Reply(text="one two three", chunks=3), Reply(text="one two three", chunks=3))
    tapped = [e.to_dict() for e in client.messages.create(**ARGS, messages=[user("q")], stream=True)]
    plain = [e.to_dict() for e in bare.messages.create(**ARGS, messages=[user("q")], stream=True)]
    for events in (tapped, plain):
        events[0]["message"].pop("id")
    assert tapped == plain


def test_streamed_tool_use_is_stored_like_the_unstreamed_one(client, server, mem):
    spec = ToolCallSpec(name="lookup", arguments='{"q": "tokyo", "n": 3}', id="toolu_s")
    server.script(Reply(tool_calls=[spec], chunks=4), Reply(tool_calls=[spec]))
    with mem.scope(session_id="streamed"):
        list(client.messages.create(**ARGS, messages=[user("find")], stream=True))
    with mem.scope(session_id="plain"):
        client.messages.create(**ARGS, messages=[user("find")])
    assert mem.history("streamed") == mem.history("plain")
    (ex,) = exchanges(mem, "streamed")
    assert ex.output[0].tool_calls[0].arguments == '{"q": "tokyo", "n": 3}'
    assert ex.finish_reasons == ("tool_use",) and ex.stream


def test_stream_helper_text_stream_is_captured_once_with_history(client, server, mem):
    with mem.scope(session_id="helper"):
        client.messages.create(**ARGS, messages=[user("I am Ada")])
        with client.messages.stream(**ARGS, messages=[user("who am I?")]) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text == "You said: who am I?" == final.content[0].text
    assert len(server.requests) == 2
    assert server.last_json()["messages"] == [
        user("I am Ada"),
        {"role": "assistant", "content": "You said: I am Ada"},
        user("who am I?"),
    ]
    assert server.last_json()["stream"] is True
    streamed = [ex for ex in exchanges(mem, "helper") if ex.stream]
    assert len(streamed) == 1 and streamed[0].status == "ok"
    assert [m.content for m in streamed[0].output] == ["You said: who am I?"]
    assert (streamed[0].usage.input_tokens, streamed[0].usage.output_tokens) == (11, 7)


def test_stream_helper_get_final_message_alone_is_captured_once(client, mem):
    with mem.scope(session_id="final"):
        with client.messages.stream(**ARGS, messages=[user("hello")]) as stream:
            message = stream.get_final_message()
            assert stream.get_final_text() == "You said: hello"
        collect_garbage()
    assert message.stop_reason == "end_turn"
    (ex,) = exchanges(mem, "final")
    assert ex.status == "ok" and [m.content for m in ex.messages] == ["hello", "You said: hello"]


def test_stream_helper_left_early_is_captured_once_as_partial(client, server, mem):
    server.script(Reply(text="a b c d e f g h", chunks=8))
    with mem.scope(session_id="early"):
        with client.messages.stream(**ARGS, messages=[user("go")]) as stream:
            for event in stream:
                if event.type == "text":
                    break
        collect_garbage()
    (ex,) = exchanges(mem, "early")
    assert ex.status == "partial" and ex.output[0].content == "a "


def test_stream_helper_never_entered_sends_and_stores_nothing(client, server, mem):
    with mem.scope(session_id="idle"):
        manager = client.messages.stream(**ARGS, messages=[user("never sent")])
        del manager
        collect_garbage()
    assert server.requests == []
    assert exchanges(mem, "idle") == []


def test_beta_stream_helper_is_captured_once(client, server, mem):
    with mem.scope(session_id="beta"):
        client.beta.messages.create(**ARGS, messages=[user("first")])
        with client.beta.messages.stream(**ARGS, messages=[user("second")]) as stream:
            assert stream.get_final_text() == "You said: second"
    assert server.last_json()["messages"][0] == user("first")
    assert [m.content for m in mem.history("beta")] == [
        "first",
        "You said: first",
        "second",
        "You said: second",
    ]


def test_stream_cut_by_the_server_is_captured_with_the_error(client, server, mem):
    server.script(Reply(text="abcdefgh", chunks=4, truncate_stream_after=4))
    with mem.scope(session_id="cut"), pytest.raises(Exception):  # noqa: B017 - the SDK's own error
        list(client.messages.create(**ARGS, messages=[user("q")], stream=True))
    (ex,) = exchanges(mem, "cut")
    assert ex.status == "error" and ex.output[0].content == "ab"


def test_unregister_restores_the_stream_helper(client, server, mem):
    mem.unregister(client)
    with mem.scope(session_id="off"), client.messages.stream(**ARGS, messages=[user("x")]) as stream:
        stream.until_done()
    assert exchanges(mem, "off") == []


def test_async_create_stream_and_helper_inject_and_capture(aclient, server, mem):
    async def main():
        with mem.scope(session_id="async"):
            await aclient.messages.create(**ARGS, messages=[user("one")])
            events = await aclient.messages.create(**ARGS, messages=[user("two")], stream=True)
            async for _event in events:
                pass
            async with aclient.messages.stream(**ARGS, messages=[user("three")]) as stream:
                text = "".join([t async for t in stream.text_stream])
                final = await stream.get_final_message()
            async with aclient.beta.messages.stream(**ARGS, messages=[user("four")]) as stream:
                beta = await stream.get_final_text()
        return text, final, beta

    text, final, beta = asyncio.run(main())
    assert text == final.content[0].text == "You said: three" and beta == "You said: four"
    assert [m["content"] for m in server.last_json()["messages"]] == [
        "one",
        "You said: one",
        "two",
        "You said: two",
        "three",
        "You said: three",
        "four",
    ]
    assert len(exchanges(mem, "async")) == 4


def test_async_stream_closed_early_finalises_once(aclient, server, mem):
    server.script(Reply(text="a b c d", chunks=4))

    async def main():
        with mem.scope(session_id="aclose"):
            async with aclient.messages.stream(**ARGS, messages=[user("q")]) as stream:
                async for _event in stream:
                    break

    asyncio.run(main())
    collect_garbage()
    (ex,) = exchanges(mem, "aclose")
    assert ex.status == "partial"


def test_async_client_is_matched(server, mem):
    client = anthropic.AsyncAnthropic(base_url=server.anthropic_base_url, api_key="sk-ant-x", max_retries=0)
    assert mem.register(client) is client
    assert (client, "anthropic") in list(mem.registered())
