"""litellm specifics: offline ``mock_response`` calls (sync, async, streaming), the Router,
provider names, credentials, restore, and that nothing imports litellm unasked."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import litellm
import pytest

import memtap
import memtap_litellm
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.wire import SystemBlock
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply

KEY = "sk-test-0123456789abcdefghijklmnop"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def mock(text: str, reply: str, **kw):
    return litellm.completion(model="gpt-4o", messages=[user(text)], mock_response=reply, **kw)


def stored(mem: memtap.Memory, session: str) -> list[tuple[str, str]]:
    assert mem.flush(timeout=10)
    return [(m.role, m.content) for m in mem.history(session)]


# -- offline, through litellm's mock_response ---------------------------------------------


def test_mock_calls_are_injected_and_captured(mem, spy):
    mem.register(litellm)
    with mem.scope(entity_id="e", session_id="mock"):
        assert mock("I like tea", "noted").choices[0].message.content == "noted"
        mock("what do I like?", "tea")
    assert spy.seen[-1] == [
        {"role": "user", "content": "I like tea"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "what do I like?"},
    ]
    assert stored(mem, "mock") == [
        ("user", "I like tea"),
        ("assistant", "noted"),
        ("user", "what do I like?"),
        ("assistant", "tea"),
    ]


def test_mock_stream_is_unchanged_and_captured_with_usage(mem, spy):
    bare = [c.model_dump(exclude={"id", "created"}) for c in mock("hi", "hello there you", stream=True)]
    mem.register(litellm)
    with mem.scope(session_id="mock-stream"):
        stream = mock("hi", "hello there you", stream=True)
        assert isinstance(stream, litellm.CustomStreamWrapper)
        chunks = [c.model_dump(exclude={"id", "created"}) for c in stream]
    # memtap asked for usage; the caller does not see the extra chunk
    assert chunks == bare
    assert spy.seen[-1] == [{"role": "user", "content": "hi"}]
    (ex,) = mem.store.exchanges(session_id="mock-stream") if mem.flush(10) else ()
    assert ex.stream and ex.status == "ok" and ex.output[0].content == "hello there you"
    assert ex.usage.input_tokens and ex.usage.output_tokens


def test_caller_asking_for_usage_still_sees_it(mem):
    mem.register(litellm)
    stream = mock("hi", "hello", stream=True, stream_options={"include_usage": True})
    assert any(not c.choices and c.usage for c in stream)


def test_mock_async_and_async_stream(mem, spy):
    mem.register(litellm)

    async def main():
        with mem.scope(session_id="amock"):
            reply = await litellm.acompletion(model="gpt-4o", messages=[user("one")], mock_response="1")
            stream = await litellm.acompletion(
                model="gpt-4o", messages=[user("two")], mock_response="2", stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return reply.choices[0].message.content, text

    assert asyncio.run(main()) == ("1", "2")
    assert spy.seen[-1][:2] == [user("one"), {"role": "assistant", "content": "1"}]
    assert stored(mem, "amock") == [("user", "one"), ("assistant", "1"), ("user", "two"), ("assistant", "2")]


@pytest.mark.parametrize("how", ["break", "close", "next-then-drop"])
def test_abandoned_mock_stream_is_captured_once_as_partial(mem, how):
    mem.register(litellm)
    with mem.scope(session_id=f"abandon-{how}"):
        stream = mock("go", "a b c d e f g h i j", stream=True)
        if how == "break":
            for _ in stream:
                break
        elif how == "close":
            next(stream)
            stream.close()
        else:
            next(stream)
        del stream
        collect_garbage()
    if how == "next-then-drop":
        # Only collection can tell a stream read with next() was abandoned, and litellm's
        # background logging holds the stream for a moment after the caller let it go.
        deadline = time.monotonic() + 10
        while not list(mem.store.exchanges(session_id="abandon-next-then-drop")):
            assert time.monotonic() < deadline, "the abandoned stream was never finalised"
            collect_garbage()
            mem.flush(1)
            time.sleep(0.02)
    assert mem.flush(10)
    exchanges = list(mem.store.exchanges(session_id=f"abandon-{how}"))
    assert [e.status for e in exchanges] == ["partial"]


def test_async_break_is_captured_as_partial(mem):
    mem.register(litellm)

    async def main():
        with mem.scope(session_id="abreak"):
            stream = await litellm.acompletion(
                model="gpt-4o", messages=[user("go")], mock_response="a b c d e f", stream=True
            )
            async for _ in stream:
                break
            await stream.aclose()

    asyncio.run(main())
    assert mem.flush(10)
    assert [e.status for e in mem.store.exchanges(session_id="abreak")] == ["partial"]


def test_positional_arguments(mem, spy):
    mem.register(litellm)
    with mem.scope(session_id="pos"):
        litellm.completion("gpt-4o", [user("first")], mock_response="ok")
        litellm.completion("gpt-4o", [user("second")], mock_response="ok")
    assert [m["content"] for m in spy.seen[-1]] == ["first", "ok", "second"]


def test_app_resending_message_objects(mem, spy):
    """An app appending litellm's own Message objects: read, never modified."""
    mem.register(litellm)
    with mem.scope(session_id="objects"):
        answer = mock("hello", "hi!").choices[0].message
        msgs = [user("hello"), answer, user("again")]
        litellm.completion(model="gpt-4o", messages=msgs, mock_response="yes")
    assert msgs[1] is answer
    assert stored(mem, "objects")[-2:] == [("user", "again"), ("assistant", "yes")]


# -- the wire, through litellm's openai/ provider ----------------------------------------


def test_wire_body_and_provider_name(mem, server, memtap_spans):
    mem.register(litellm)
    with mem.scope(entity_id="w", session_id="wire"):
        for text in ("a", "b"):
            litellm.completion(
                model="openai/m", messages=[user(text)], api_base=server.openai_base_url, api_key=KEY
            )
    body = server.last_json()
    assert body["messages"] == [user("a"), {"role": "assistant", "content": "You said: a"}, user("b")]
    assert "stream_options" not in body
    assert mem.flush(10)
    (first, _) = mem.store.exchanges(session_id="wire")
    assert first.provider == "openai"
    spans = [s for s in memtap_spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name")]
    assert spans and {s.attributes["gen_ai.provider.name"] for s in spans} == {"openai"}


class Recalls:
    @memtap.hookimpl
    def memtap_request_injections(self, request):
        return [SystemBlock(text="Alice likes tea")]


def test_cached_prompt_gets_per_turn_memory_as_a_trailing_user_turn(server, store):
    """litellm moves system messages into an Anthropic ``system``; with ``cache_control`` in
    use the per-turn block is a user message at the end (merged into the latest user turn,
    after its breakpoint, by litellm's Anthropic transform), never a system message."""
    memory = memtap.Memory(
        store,
        plugins=[memtap_litellm, Recalls()],
        entry_points=False,
        history=memtap.HistoryBudget(max_messages=0),
    )
    memory.register(litellm)
    part = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    system = {"role": "system", "content": "Be brief."}
    wire = {"api_base": server.openai_base_url, "api_key": KEY}
    try:
        litellm.completion(model="openai/m", messages=[system, {"role": "user", "content": [part]}], **wire)
        sent = server.last_json()["messages"]
        assert sent[0] == system and [m["role"] for m in sent] == ["system", "user", "user"]
        assert sent[2]["content"].startswith(OPEN_TAG) and "Alice likes tea" in sent[2]["content"]
        litellm.completion(model="openai/m", messages=[user("hi")], **wire)
        sent = server.last_json()["messages"]  # no caching: the default place, before the turn
        assert [m["role"] for m in sent] == ["system", "user"] and "Alice likes tea" in sent[0]["content"]
    finally:
        memory.close()


def test_api_key_is_never_stored(mem, server, store):
    mem.register(litellm)
    with mem.scope(session_id="secret"):
        litellm.completion(
            model="openai/m", messages=[user("hi")], api_base=server.openai_base_url, api_key=KEY
        )
    assert mem.flush(10)
    dumped = json.dumps(
        [memtap.protocol.model.converter.unstructure(e) for e in store.exchanges()], default=str
    )
    assert KEY not in dumped and server.requests[-1].headers["authorization"].endswith(KEY)


def test_tool_calls_stream_over_the_wire(mem, server):
    from memtap.testing.server import ToolCallSpec

    server.script(Reply(tool_calls=(ToolCallSpec(name="lookup", arguments='{"q": "x"}', id="call_1"),)))
    mem.register(litellm)
    with mem.scope(session_id="stream-tools"):
        list(
            litellm.completion(
                model="openai/m",
                messages=[user("look it up")],
                api_base=server.openai_base_url,
                api_key=KEY,
                stream=True,
            )
        )
    assert mem.flush(10)
    (ex,) = mem.store.exchanges(session_id="stream-tools")
    assert [(c.id, c.name, c.arguments) for c in ex.output[0].tool_calls] == [
        ("call_1", "lookup", '{"q": "x"}')
    ]


def test_server_error_fails_the_call_not_memtap(mem, server):
    server.script(Reply(status=400, text="bad request"))
    mem.register(litellm)
    with mem.scope(session_id="err"), pytest.raises(litellm.BadRequestError):
        litellm.completion(
            model="openai/m",
            messages=[user("x")],
            api_base=server.openai_base_url,
            api_key=KEY,
            max_retries=0,
        )
    assert stored(mem, "err") == []


# -- Router ------------------------------------------------------------------------------


@pytest.fixture
def router(server):
    params = {"model": "openai/m", "api_base": server.openai_base_url, "api_key": KEY}
    return litellm.Router(model_list=[{"model_name": "fast", "litellm_params": params}])


def test_router_calls_are_injected_and_captured(mem, server, router):
    assert mem.register(router) is router
    with mem.scope(session_id="router"):
        router.completion(model="fast", messages=[user("one")])
        chunks = router.completion(model="fast", messages=[user("two")], stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: two"
    assert server.last_json()["messages"][:2] == [
        user("one"),
        {"role": "assistant", "content": "You said: one"},
    ]
    assert stored(mem, "router") == [
        ("user", "one"),
        ("assistant", "You said: one"),
        ("user", "two"),
        ("assistant", "You said: two"),
    ]
    assert {e.provider for e in mem.store.exchanges(session_id="router")} == {"openai"}


def test_router_async(mem, server, router):
    mem.register(router)

    async def main():
        with mem.scope(session_id="arouter"):
            await router.acompletion(model="fast", messages=[user("one")])
            stream = await router.acompletion(model="fast", messages=[user("two")], stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert asyncio.run(main()) == "You said: two"
    assert len(stored(mem, "arouter")) == 4


def test_router_and_module_together_capture_once(mem, server, router):
    mem.register(litellm)
    mem.register(router)
    with mem.scope(session_id="both"):
        router.completion(model="fast", messages=[user("one")])
    assert stored(mem, "both") == [("user", "one"), ("assistant", "You said: one")]
    mem.unregister(router)
    assert litellm.completion.__memtap_original__  # the module stays tapped
    mem.unregister(litellm)
    assert not hasattr(litellm.completion, "__memtap_original__")


def test_unregister_restores_module_and_router(mem, router):
    completion, acompletion = litellm.completion, litellm.acompletion
    mem.register(litellm)
    mem.register(router)
    assert litellm.completion is not completion and "completion" in vars(router)
    mem.unregister(router)
    mem.unregister(litellm)
    assert litellm.completion is completion and litellm.acompletion is acompletion
    assert "completion" not in vars(router) and "acompletion" not in vars(router)


def test_function_imported_after_register_passes_through_after_unregister(mem, spy):
    mem.register(litellm)
    completion = litellm.completion
    mem.unregister(litellm)
    with mem.scope(session_id="late"):
        completion(model="gpt-4o", messages=[user("x")], mock_response="y")
    assert stored(mem, "late") == []


def test_store_down_fails_open(server):
    from memtap.testing.conformance import _BrokenStore

    mem = memtap.Memory(_BrokenStore(), plugins=[memtap_litellm], entry_points=False)
    mem.register(litellm)
    try:
        assert mock("x", "still fine").choices[0].message.content == "still fine"
        assert "".join(c.choices[0].delta.content or "" for c in mock("x", "ok", stream=True)) == "ok"
    finally:
        mem.close(timeout=0.5)


def test_other_objects_are_not_matched():
    assert memtap_litellm.memtap_match_client(client=object()) is None
    assert memtap_litellm.memtap_match_client(client=litellm.Router) is None


def test_plugin_never_imports_litellm():
    code = (
        "import sys, memtap, memtap_litellm\n"
        "m = memtap.Memory('memory://')\n"
        "assert 'litellm' in m.providers(), m.providers()\n"
        "assert memtap_litellm.memtap_match_client(client=object()) is None\n"
        "assert 'litellm' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
