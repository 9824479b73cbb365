"""xai-sdk specifics: what goes over gRPC, system blocks, server-held conversations,
streams, errors, restore, secrets."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import grpc
import pytest
from xai_sdk.chat import system, user
from xai_server import API_KEY, make_xai

import memtap
import memtap_xai
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.wire import SystemBlock
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply, ToolCallSpec

MODEL = "grok-test"


class Remembers:
    @memtap.hookimpl
    def memtap_request_injections(self, request):
        return [SystemBlock(text="Alice lives in Tokyo")]


def stored(mem, session):
    assert mem.flush(10)
    return [(m.role, m.content) for m in mem.history(session)]


def test_wire_request_and_stored_exchange(mem, xai_server):
    client = mem.register(make_xai(xai_server))
    with mem.scope(entity_id="e", session_id="wire"):
        client.chat.create(model=MODEL, messages=[system("be brief"), user("I am Ada")]).sample()
        client.chat.create(model=MODEL, messages=[system("be brief"), user("who am I?")]).sample()
    sent = xai_server.last_json()["messages"]
    assert [(m["role"], m["content"][0]["text"]) for m in sent] == [
        ("ROLE_SYSTEM", "be brief"),
        ("ROLE_USER", "I am Ada"),
        ("ROLE_ASSISTANT", "You said: I am Ada"),
        ("ROLE_USER", "who am I?"),
    ]
    assert mem.flush(10)
    ex = list(mem.store.exchanges(session_id="wire"))[-1]
    assert (ex.provider, ex.system, ex.request_model, ex.finish_reasons) == (
        "xai",
        "be brief",
        MODEL,
        ("REASON_STOP",),
    )
    assert (ex.usage.input_tokens, ex.usage.output_tokens) == (11, 7)


def test_untouched_request_is_the_sdks_own(mem, xai_server):
    """Nothing to inject: the SDK's proto is sent as it is (no JSON round trip)."""
    bare = make_xai(xai_server)
    bare.chat.create(model=MODEL, messages=[user("x")], temperature=0.5, max_tokens=9).sample()
    expected = xai_server.last_json()
    client = mem.register(make_xai(xai_server))
    client.chat.create(model=MODEL, messages=[user("x")], temperature=0.5, max_tokens=9).sample()
    assert xai_server.last_json() == expected


def test_system_block_is_a_system_message_after_the_apps(store, xai_server):
    mem = memtap.Memory(store, plugins=[memtap_xai, Remembers()], entry_points=False)
    try:
        client = mem.register(make_xai(xai_server))
        client.chat.create(model=MODEL, messages=[system("be brief"), user("hi")]).sample()
    finally:
        mem.close()
    sent = xai_server.last_json()["messages"]
    assert [m["role"] for m in sent] == ["ROLE_SYSTEM", "ROLE_SYSTEM", "ROLE_USER"]
    assert (
        sent[1]["content"][0]["text"].startswith(OPEN_TAG)
        and "Alice lives in Tokyo" in sent[1]["content"][0]["text"]
    )


def test_server_held_conversation_gets_no_history(mem, xai_server):
    client = mem.register(make_xai(xai_server))
    with mem.scope(session_id="held"):
        client.chat.create(model=MODEL, messages=[user("one")]).sample()
        client.chat.create(model=MODEL, messages=[user("two")], previous_response_id="resp_1").sample()
    assert [m["content"][0]["text"] for m in xai_server.last_json()["messages"]] == ["two"]


def test_chat_created_before_registration_is_tapped(mem, xai_server):
    client = make_xai(xai_server)
    chat = client.chat.create(model=MODEL, messages=[user("early")])
    mem.register(client)
    with mem.scope(session_id="early"):
        chat.sample()
    assert stored(mem, "early") == [("user", "early"), ("assistant", "You said: early")]


def test_stream_chunks_unchanged_and_tool_calls_captured(mem, xai_server):
    spec = ToolCallSpec(name="weather", arguments='{"city": "Paris"}', id="call_w")
    bare = make_xai(xai_server)
    xai_server.script(Reply(text="let me check", tool_calls=[spec], chunks=3))
    expected = [
        (c.content, [t.id for t in c.tool_calls])
        for _, c in bare.chat.create(model=MODEL, messages=[user("w")]).stream()
    ]
    client = mem.register(make_xai(xai_server))
    xai_server.script(Reply(text="let me check", tool_calls=[spec], chunks=3))
    with mem.scope(session_id="stool"):
        chat = client.chat.create(model=MODEL, messages=[user("w")])
        got = [(c.content, [t.id for t in c.tool_calls]) for _, c in chat.stream()]
    assert got == expected
    assert mem.flush(10)
    (ex,) = mem.store.exchanges(session_id="stool")
    assert ex.output[0].content == "let me check"
    assert [(c.id, c.name, c.arguments) for c in ex.output[0].tool_calls] == [
        ("call_w", "weather", '{"city": "Paris"}')
    ]
    assert ex.finish_reasons == ("REASON_TOOL_CALLS",)


def test_async_stream_break_is_partial(mem, xai_server):
    xai_server.script(Reply(text="a b c d e f", chunks=6))

    async def main():
        client = mem.register(make_xai(xai_server, is_async=True))
        with mem.scope(session_id="abreak"):
            stream = client.chat.create(model=MODEL, messages=[user("go")]).stream()
            async for _ in stream:
                break
            await stream.aclose()
        collect_garbage()

    asyncio.run(main())
    assert mem.flush(10)
    assert [e.status for e in mem.store.exchanges(session_id="abreak")] == ["partial"]


def test_rpc_error_is_raised_and_nothing_stored(mem, xai_server):
    xai_server.script(Reply(status=400, text="bad request"))
    client = mem.register(make_xai(xai_server))
    with mem.scope(session_id="err"), pytest.raises(grpc.RpcError):
        client.chat.create(model=MODEL, messages=[user("x")]).sample()
    assert stored(mem, "err") == []


def test_unregister_restores_the_stub(mem, xai_server):
    client = make_xai(xai_server)
    stub = client.chat._stub
    unary, streaming = stub.GetCompletion, stub.GetCompletionChunk
    mem.register(client)
    assert stub.GetCompletion is not unary
    mem.unregister(client)
    assert stub.GetCompletion is unary and stub.GetCompletionChunk is streaming


def test_api_key_is_never_stored(mem, xai_server, store):
    client = mem.register(make_xai(xai_server))
    with mem.scope(session_id="key"):
        client.chat.create(model=MODEL, messages=[user("hi")]).sample()
    assert mem.flush(10)
    dumped = json.dumps(
        [memtap.protocol.model.converter.unstructure(e) for e in store.exchanges()], default=str
    )
    assert API_KEY not in dumped and xai_server.metadata[-1]["authorization"] == f"Bearer {API_KEY}"


def test_other_objects_are_not_matched():
    assert memtap_xai.memtap_match_client(client=object()) is None


def test_plugin_never_imports_xai_sdk():
    code = (
        "import sys, memtap_xai\n"
        "assert memtap_xai.memtap_match_client(client=object()) is None\n"
        "assert 'xai_sdk' not in sys.modules and 'grpc' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
