"""The openai plugin with the real openai SDK against the local scripted server: Chat
Completions, sync, non-streaming. What went over the wire and what was stored."""

from __future__ import annotations

import openai
import pytest
from openai_support import API_KEY, user

import memtap
from memtap.storage.store import InMemoryStore
from memtap.testing.server import Reply, ToolCallSpec


def test_history_is_injected_before_the_new_message(client, server, mem):
    with mem.scope(entity_id="alice", session_id="s1"):
        client.chat.completions.create(model="m", messages=[user("I live in Tokyo")])
        client.chat.completions.create(
            model="m", messages=[{"role": "system", "content": "Be brief."}, user("Where do I live?")]
        )
    sent = server.last_json()["messages"]
    assert sent == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "I live in Tokyo"},
        {"role": "assistant", "content": "You said: I live in Tokyo"},
        {"role": "user", "content": "Where do I live?"},
    ]


def test_injected_history_is_not_captured_again(client, mem):
    with mem.scope(entity_id="alice", session_id="s1"):
        for text in ("one", "two", "three"):
            client.chat.completions.create(model="m", messages=[user(text)])
    assert [(m.role, m.content) for m in mem.history("s1")] == [
        ("user", "one"),
        ("assistant", "You said: one"),
        ("user", "two"),
        ("assistant", "You said: two"),
        ("user", "three"),
        ("assistant", "You said: three"),
    ]


def test_app_that_keeps_its_own_history_gets_no_duplicates(client, server, mem):
    conversation = [user("hello")]
    with mem.scope(session_id="own"):
        reply = client.chat.completions.create(model="m", messages=conversation)
        conversation += [{"role": "assistant", "content": reply.choices[0].message.content}, user("again")]
        client.chat.completions.create(model="m", messages=conversation)
    assert server.last_json()["messages"] == conversation
    assert [m.content for m in mem.history("own")] == [
        "hello",
        "You said: hello",
        "again",
        "You said: again",
    ]


def test_response_reaches_the_caller_unchanged(client, bare, server):
    server.script(Reply(text="same answer"), Reply(text="same answer"))
    tapped = client.chat.completions.create(model="m", messages=[user("q")])
    plain = bare.chat.completions.create(model="m", messages=[user("q")])
    assert type(tapped) is type(plain)
    drop = {"id", "created"}
    assert {k: v for k, v in tapped.to_dict().items() if k not in drop} == {
        k: v for k, v in plain.to_dict().items() if k not in drop
    }


def test_usage_finish_reason_and_models_are_stored(client, mem, server):
    server.script(Reply(text="hi", input_tokens=42, output_tokens=5))
    with mem.scope(session_id="u"):
        client.chat.completions.create(model="gpt-x", messages=[user("q")])
    mem.flush()
    (exchange,) = mem.store.exchanges(session_id="u")
    assert exchange.usage.input_tokens == 42 and exchange.usage.output_tokens == 5
    assert exchange.finish_reasons == ("stop",)
    assert exchange.request_model == "gpt-x" and exchange.response_model == "gpt-x"
    assert exchange.provider == "openai" and exchange.operation == "chat" and not exchange.stream


def test_tool_call_round_trip_is_stored_and_replayed_whole(client, server, mem):
    server.script(
        Reply(tool_calls=(ToolCallSpec(name="weather", arguments='{"city": "Tokyo"}', id="call_1"),))
    )
    with mem.scope(session_id="tools"):
        first = client.chat.completions.create(
            model="m",
            messages=[user("weather in Tokyo?")],
            tools=[{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
        )
        call = first.choices[0].message.tool_calls[0]
        assert call.id == "call_1"
        client.chat.completions.create(
            model="m",
            messages=[
                user("weather in Tokyo?"),
                first.choices[0].message.to_dict(),
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            ],
        )
        client.chat.completions.create(model="m", messages=[user("thanks")])
    sent = server.last_json()["messages"]
    roles = [m["role"] for m in sent]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[1]["tool_calls"][0]["id"] == "call_1"
    assert sent[1]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Tokyo"}'}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    history = mem.history("tools")
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def test_history_budget_never_splits_a_tool_call_from_its_result(server, store):
    mem = memtap.Memory(
        store,
        plugins=[__import__("memtap_openai")],
        entry_points=False,
        history=memtap.HistoryBudget(max_messages=3),
    )
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    server.script(Reply(tool_calls=(ToolCallSpec(name="f", arguments="{}", id="c9"),)))
    with mem.scope(session_id="b"):
        first = client.chat.completions.create(model="m", messages=[user("call f")])
        client.chat.completions.create(
            model="m",
            messages=[
                user("call f"),
                first.choices[0].message.to_dict(),
                {"role": "tool", "tool_call_id": "c9", "content": "done"},
            ],
        )
        client.chat.completions.create(model="m", messages=[user("next")])
    # Stored: user, assistant(tool call), tool, assistant. Three messages fit; the newest whole
    # units are [assistant(tool call), tool] and [assistant], but history must not open with a
    # tool unit when a later unit can start it, so only the final answer is injected.
    assert server.last_json()["messages"] == [
        {"role": "assistant", "content": "You said: call f"},
        user("next"),
    ]
    mem.close()


def test_unregistered_client_is_untouched(client, bare, server, mem):
    with mem.scope(session_id="iso"):
        client.chat.completions.create(model="m", messages=[user("registered")])
        bare.chat.completions.create(model="m", messages=[user("bare")])
    assert server.last_json()["messages"] == [user("bare")]
    assert [m.content for m in mem.history("iso")] == ["registered", "You said: registered"]


def test_register_is_idempotent_and_unregister_restores(server, mem):
    c = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY)
    original_create = c.chat.completions.create
    assert mem.register(c) is c
    patched = c.chat.completions.create
    mem.register(c)
    assert c.chat.completions.create is patched
    assert patched != original_create
    mem.unregister(c)
    assert "create" not in vars(c.chat.completions)
    assert "_prepare_options" not in vars(c)
    assert c.chat.completions.create == original_create
    with mem.scope(session_id="after"):
        c.chat.completions.create(model="m", messages=[user("x")])
    assert mem.history("after") == []


def test_registering_with_a_second_memory_is_refused(server, mem, store):
    c = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    other = memtap.Memory(InMemoryStore(), plugins=[__import__("memtap_openai")], entry_points=False)
    with pytest.raises(ValueError, match="already registered"):
        other.register(c)
    other.close()


def test_calls_outside_a_scope_go_to_the_default_entity_and_session(client, mem):
    client.chat.completions.create(model="m", messages=[user("unscoped")])
    history = mem.history("default", entity_id="default")
    assert [m.content for m in history] == ["unscoped", "You said: unscoped"]


def test_parse_with_a_pydantic_model_is_captured(client, server, mem):
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):
        name: str

    server.script(Reply(text='{"name": "Tokyo"}'))
    with mem.scope(session_id="parse"):
        parsed = client.chat.completions.parse(model="m", messages=[user("city?")], response_format=City)
    assert parsed.choices[0].message.parsed == City(name="Tokyo")
    assert [m.content for m in mem.history("parse")] == ["city?", '{"name": "Tokyo"}']


def test_http_error_fails_the_call_as_usual_and_stores_nothing(client, server, mem):
    server.script(Reply(status=400))
    with mem.scope(session_id="err"), pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[user("bad")])
    assert mem.history("err") == []


def test_entities_never_see_each_others_history(client, server, mem):
    with mem.scope(entity_id="alice", session_id="shared-name"):
        client.chat.completions.create(model="m", messages=[user("alice secret")])
    with mem.scope(entity_id="bob", session_id="shared-name"):
        client.chat.completions.create(model="m", messages=[user("bob asks")])
    assert server.last_json()["messages"] == [user("bob asks")]
    assert "alice secret" not in str(mem.history("shared-name", entity_id="bob"))


def test_unknown_client_names_installed_providers(mem):
    with pytest.raises(memtap.UnsupportedClientError, match="memtap_openai"):
        mem.register(object())


def test_with_raw_response_is_captured_even_when_built_before_register(server, mem):
    c = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY)
    early_view = c.chat.completions.with_raw_response
    mem.register(c)
    with mem.scope(session_id="raw"):
        raw = c.chat.completions.with_raw_response.create(model="m", messages=[user("raw one")])
        assert raw.parse().choices[0].message.content == "You said: raw one"
        c.chat.completions.with_raw_response.create(model="m", messages=[user("raw two")])
    assert [m["content"] for m in server.last_json()["messages"]] == [
        "raw one",
        "You said: raw one",
        "raw two",
    ]
    assert [m.content for m in mem.history("raw")][-1] == "You said: raw two"
    assert early_view is not c.chat.completions.with_raw_response
    mem.unregister(c)
    with mem.scope(session_id="raw-after"):
        c.chat.completions.with_raw_response.create(model="m", messages=[user("untapped")])
    assert mem.history("raw-after") == []
