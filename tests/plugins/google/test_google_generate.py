"""The google plugin with the real google-genai SDK against the local scripted server:
what went over the wire (camelCase JSON) and what was stored."""

from __future__ import annotations

import asyncio
import sys

import pytest
from google import genai
from google.genai import errors, types

import memtap
import memtap_google
from memtap import hookimpl
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.model import Attribution, Exchange, Message, ToolCall
from memtap.protocol.wire import InjectionPlan, SystemBlock
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply, ToolCallSpec

MODEL = "gemini-x"


def text(value, role="user"):
    return {"role": role, "parts": [{"text": value}]}


def sent_contents(server):
    return [{"role": c.get("role"), "parts": c["parts"]} for c in server.last_json()["contents"]]


def exchanges(mem, session):
    assert mem.flush(timeout=10)
    return list(mem.store.exchanges(session_id=session))


class Recall:
    """A test injector contributing a fixed memory block."""

    @hookimpl
    def memtap_request_injections(self, request):
        return [SystemBlock(text="Alice lives in Tokyo")]


@pytest.fixture
def recalled(store, new_client):
    memory = memtap.Memory(store, plugins=[memtap_google, Recall()], entry_points=False)
    yield memory, memory.register(new_client())
    memory.close()


def test_history_goes_before_contents_and_is_not_captured_again(client, server, mem):
    with mem.scope(entity_id="alice", session_id="s1"):
        client.models.generate_content(model=MODEL, contents="I live in Tokyo")
        client.models.generate_content(model=MODEL, contents="Where do I live?")
    assert sent_contents(server) == [
        text("I live in Tokyo"),
        text("You said: I live in Tokyo", "model"),
        text("Where do I live?"),
    ]
    assert [(m.role, m.content) for m in mem.history("s1")] == [
        ("user", "I live in Tokyo"),
        ("assistant", "You said: I live in Tokyo"),
        ("user", "Where do I live?"),
        ("assistant", "You said: Where do I live?"),
    ]


def test_only_contents_change_on_the_wire(client, bare, server, mem):
    config = types.GenerateContentConfig(
        system_instruction="Be brief.",
        temperature=0.3,
        max_output_tokens=50,
        stop_sequences=["END"],
        safety_settings=[types.SafetySetting(category="HARM_CATEGORY_HARASSMENT", threshold="BLOCK_NONE")],
    )
    with mem.scope(session_id="lossless"):
        client.models.generate_content(model=MODEL, contents="one", config=config)
        client.models.generate_content(model=MODEL, contents="two", config=config)
    sent = server.last_json()
    bare.models.generate_content(model=MODEL, contents="two", config=config)
    plain = server.last_json()
    assert list(sent) == list(plain) and "model" not in sent
    assert {k: v for k, v in sent.items() if k != "contents"} == {
        k: v for k, v in plain.items() if k != "contents"
    }
    assert sent["contents"][-1] == plain["contents"][-1]
    assert server.requests[-1].path == server.requests[-2].path


def test_response_reaches_the_caller_unchanged(client, bare, server):
    server.script(Reply(text="same"), Reply(text="same"))
    tapped = client.models.generate_content(model=MODEL, contents="q")
    plain = bare.models.generate_content(model=MODEL, contents="q")
    drop = {"response_id", "sdk_http_response"}
    assert type(tapped) is type(plain)
    assert tapped.model_dump(exclude=drop) == plain.model_dump(exclude=drop)


def test_usage_finish_reason_model_and_system_are_stored(client, server, mem):
    server.script(Reply(text="hi", input_tokens=40, output_tokens=4))
    config = types.GenerateContentConfig(system_instruction="Be brief.")
    with mem.scope(session_id="u"):
        client.models.generate_content(model=MODEL, contents="q", config=config)
    (ex,) = exchanges(mem, "u")
    assert (ex.usage.input_tokens, ex.usage.output_tokens) == (40, 4)
    assert ex.finish_reasons == ("STOP",) and ex.system == "Be brief."
    assert ex.request_model == ex.response_model == MODEL
    assert (ex.provider, ex.operation, ex.stream) == ("gcp.gemini", "chat", False)


# -- system instruction --------------------------------------------------------------------


def test_memory_block_is_one_more_part_of_the_system_instruction(recalled, server):
    _memory, client = recalled
    config = types.GenerateContentConfig(system_instruction="Be brief.")
    client.models.generate_content(model=MODEL, contents="where?", config=config)
    parts = server.last_json()["systemInstruction"]["parts"]
    assert parts[0] == {"text": "Be brief."}
    assert len(parts) == 2 and parts[1]["text"].startswith(OPEN_TAG) and "Tokyo" in parts[1]["text"]


def test_memory_block_becomes_the_system_instruction_when_there_is_none(recalled, server):
    memory, client = recalled
    with memory.scope(session_id="nosys"):
        client.models.generate_content(model=MODEL, contents="hi")
    (part,) = server.last_json()["systemInstruction"]["parts"]
    assert part["text"].startswith(OPEN_TAG)
    (ex,) = exchanges(memory, "nosys")
    assert ex.system is None


def test_system_instruction_forms_at_the_wire_level():
    protocol = memtap_google.GenerateContentProtocol()
    plan = InjectionPlan(system_blocks=[SystemBlock(text="fact")])
    snake = protocol.inject({"contents": [], "system_instruction": {"parts": [{"text": "rules"}]}}, plan)
    assert list(snake) == ["contents", "system_instruction"]
    assert snake["system_instruction"]["parts"][0] == {"text": "rules"}
    assert len(snake["system_instruction"]["parts"]) == 2
    as_string = protocol.inject({"systemInstruction": "rules"}, plan)["systemInstruction"]
    assert as_string.startswith("rules\n\n" + OPEN_TAG)


def test_a_request_on_cached_content_gets_memory_in_its_latest_user_turn(recalled, server):
    """Gemini refuses a system instruction next to ``cachedContent``: the block becomes one
    more text part of the latest user Content instead."""
    _memory, client = recalled
    config = types.GenerateContentConfig(cached_content="cachedContents/abc123")
    client.models.generate_content(model=MODEL, contents="where do I live?", config=config)
    body = server.last_json()
    assert "systemInstruction" not in body and body["cachedContent"] == "cachedContents/abc123"
    (turn,) = body["contents"]
    assert turn["role"] == "user" and turn["parts"][0] == {"text": "where do I live?"}
    assert len(turn["parts"]) == 2 and turn["parts"][1]["text"].startswith(OPEN_TAG)
    assert "Alice lives in Tokyo" in turn["parts"][1]["text"]


def test_cached_content_at_the_wire_level_never_gets_a_system_instruction():
    protocol = memtap_google.GenerateContentProtocol()
    blocks = [SystemBlock(text="stable", cache="session_init"), SystemBlock(text="turn")]
    plan = InjectionPlan(system_blocks=blocks)
    answer = {"role": "model", "parts": [{"text": "ok"}]}
    body = {"cached_content": "cachedContents/x", "contents": [answer]}
    out = protocol.inject(body, plan)
    assert "system_instruction" not in out and "systemInstruction" not in out
    assert out["contents"][0] == answer  # no user turn: memory comes as a new one after it
    (part,) = out["contents"][1]["parts"]
    assert out["contents"][1]["role"] == "user" and part["text"].index("stable") < part["text"].index("turn")


# -- chats ---------------------------------------------------------------------------------


def test_a_chat_turn_is_captured_once_and_its_history_never_injected_twice(client, server, mem):
    with mem.scope(session_id="chat"):
        chat = client.chats.create(model=MODEL)
        chat.send_message("one")
        "".join(c.text for c in chat.send_message_stream("two"))
        chat.send_message("three")
    assert len(server.requests) == 3
    # What the chat itself sent (its streamed answer as one Content per chunk), nothing added.
    chat_history = [c.model_dump(mode="json", exclude_none=True) for c in chat.get_history()]
    assert sent_contents(server) == [*chat_history[:-1]]
    assert [m.content for m in mem.history("chat")] == [
        "one",
        "You said: one",
        "two",
        "You said: two",
        "three",
        "You said: three",
    ]
    assert len(exchanges(mem, "chat")) == 3


def test_a_new_chat_gets_the_session_history_once(client, server, mem):
    with mem.scope(session_id="resume"):
        client.models.generate_content(model=MODEL, contents="I am Ada")
        chat = client.chats.create(model=MODEL)
        chat.send_message("who am I?")
        chat.send_message("sure?")
    assert sent_contents(server) == [
        text("I am Ada"),
        text("You said: I am Ada", "model"),
        text("who am I?"),
        text("You said: who am I?", "model"),
        text("sure?"),
    ]
    assert len(mem.history("resume")) == 6


def test_async_chat_and_stream(client, server, mem):
    async def main():
        with mem.scope(session_id="achat"):
            chat = client.aio.chats.create(model=MODEL)
            first = (await chat.send_message("one")).text
            chunks = await chat.send_message_stream("two")
            second = "".join([c.text async for c in chunks])
            return first, second

    assert asyncio.run(main()) == ("You said: one", "You said: two")
    assert [m.content for m in mem.history("achat")] == ["one", "You said: one", "two", "You said: two"]
    assert [ex.stream for ex in exchanges(mem, "achat")] == [False, True]


# -- function calls, parts -----------------------------------------------------------------


def test_function_calls_without_ids_pair_by_name(client, server, mem):
    server.script(Reply(tool_calls=[ToolCallSpec(name="get_time", arguments='{"tz": "UTC"}')]))
    with mem.scope(session_id="fc"):
        first = client.models.generate_content(model=MODEL, contents="time?")
        call = first.function_calls[0]
        assert call.id is None
        client.models.generate_content(
            model=MODEL,
            contents=[
                types.Content(role="user", parts=[types.Part(text="time?")]),
                first.candidates[0].content,
                types.Content(
                    role="user",
                    parts=[types.Part.from_function_response(name="get_time", response={"time": "12:00"})],
                ),
            ],
        )
        client.models.generate_content(model=MODEL, contents="thanks")
    history = mem.history("fc")
    assert history[1].tool_calls == (ToolCall(id="get_time", name="get_time", arguments='{"tz": "UTC"}'),)
    assert (history[2].role, history[2].tool_call_id, history[2].content) == (
        "tool",
        "get_time",
        '{"time": "12:00"}',
    )
    assert sent_contents(server)[:3] == [
        text("time?"),
        {"role": "model", "parts": [{"functionCall": {"name": "get_time", "args": {"tz": "UTC"}}}]},
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "get_time", "response": {"time": "12:00"}}}],
        },
    ]


def test_injected_history_alternates_and_starts_with_the_user(client, server, mem, store):
    store.write_exchanges(
        [
            Exchange(
                attribution=Attribution(session_id="alt"),
                provider="gcp.gemini",
                operation="chat",
                input=i,
                output=o,
            )
            for i, o in (
                ([], [Message(role="assistant", content="welcome")]),
                ([Message(role="user", content="a")], [Message(role="assistant", content="b")]),
                ([Message(role="user", content="lost")], []),
            )
        ]
    )
    with mem.scope(session_id="alt"):
        client.models.generate_content(model=MODEL, contents="next")
    assert sent_contents(server) == [text("a"), text("b", "model"), text("next")]


def test_parts_are_read_as_text_markers_and_thoughts_are_left_out(client, server, mem):
    with mem.scope(session_id="parts"):
        client.models.generate_content(
            model=MODEL,
            contents=[
                types.Content(role="user", parts=[types.Part(text="hi")]),
                types.Content(
                    role="model",
                    parts=[types.Part(text="pondering", thought=True), types.Part(text="hello")],
                ),
                types.Content(
                    role="user",
                    parts=[
                        types.Part(text="look:"),
                        types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png"),
                    ],
                ),
            ],
        )
    assert [m.content for m in mem.history("parts")] == ["hi", "hello", "look:\n[image]", "You said: look:"]


def test_usage_counts_thinking_as_output_and_reports_the_cache():
    view = memtap_google.GenerateContentProtocol().read_response(
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": "STOP"}],
            "usageMetadata": {
                "promptTokenCount": 100,
                "cachedContentTokenCount": 60,
                "candidatesTokenCount": 5,
                "thoughtsTokenCount": 20,
            },
        }
    )
    assert (view.usage.input_tokens, view.usage.output_tokens, view.usage.cached_input_tokens) == (
        100,
        25,
        60,
    )


def test_wire_shorthand_contents_are_read_and_kept():
    protocol = memtap_google.GenerateContentProtocol()
    assert [m.content for m in protocol.read_request({"contents": "hi"}).messages] == ["hi"]
    assert [
        m.content for m in protocol.read_request({"contents": {"parts": ["a", {"text": "b"}]}}).messages
    ] == ["a\nb"]
    plan = InjectionPlan(history=[Message(role="user", content="x"), Message(role="assistant", content="y")])
    assert protocol.inject({"contents": "hi"}, plan)["contents"] == [
        text("x"),
        text("y", "model"),
        {"role": "user", "parts": [{"text": "hi"}]},
    ]


# -- streams -------------------------------------------------------------------------------


def test_streamed_chunks_reach_the_caller_unchanged_and_are_stored_once(client, bare, server, mem):
    server.script(Reply(text="one two three", chunks=3), Reply(text="one two three", chunks=3))
    with mem.scope(session_id="st"):
        tapped = [
            c.model_dump(exclude={"sdk_http_response", "response_id"})
            for c in client.models.generate_content_stream(model=MODEL, contents="q")
        ]
    plain = [
        c.model_dump(exclude={"sdk_http_response", "response_id"})
        for c in bare.models.generate_content_stream(model=MODEL, contents="q")
    ]
    assert tapped == plain and len(tapped) == 3
    (ex,) = exchanges(mem, "st")
    assert ex.stream and ex.status == "ok" and ex.output[0].content == "one two three"
    assert (ex.usage.input_tokens, ex.usage.output_tokens) == (11, 7)


def test_stream_cut_by_the_server_is_captured_with_the_error(client, server, mem):
    server.script(Reply(text="abcdefgh", chunks=4, truncate_stream_after=2))
    with mem.scope(session_id="cut"), pytest.raises(Exception):  # noqa: B017 - the SDK's own error
        list(client.models.generate_content_stream(model=MODEL, contents="q"))
    (ex,) = exchanges(mem, "cut")
    assert ex.status == "error" and ex.output[0].content == "abcd"


def test_async_stream_left_early_is_captured_once_as_partial(client, server, mem):
    server.script(Reply(text="a b c d", chunks=4))

    async def main():
        with mem.scope(session_id="abreak"):
            chunks = await client.aio.models.generate_content_stream(model=MODEL, contents="q")
            async for _chunk in chunks:
                break
            await chunks.aclose()

    asyncio.run(main())
    collect_garbage()
    (ex,) = exchanges(mem, "abreak")
    assert ex.status == "partial"


# -- registration --------------------------------------------------------------------------


def test_http_error_fails_the_call_as_usual_and_stores_nothing(client, server, mem):
    server.script(Reply(status=400, text="bad request"))
    with mem.scope(session_id="err"), pytest.raises(errors.ClientError):
        client.models.generate_content(model=MODEL, contents="q")
    assert mem.history("err") == []


def test_other_calls_are_neither_injected_nor_captured(client, server, mem):
    with mem.scope(session_id="other"):
        client.models.generate_content(model=MODEL, contents="one")
        assert client.models.count_tokens(model=MODEL, contents="two").total_tokens == 1
    assert server.last_json()["contents"] == [text("two")]
    assert len(mem.history("other")) == 2


def test_client_and_its_aio_share_one_registration(new_client, server, mem):
    client = new_client()
    mem.register(client)
    mem.register(client.aio)
    with mem.scope(session_id="shared"):
        client.models.generate_content(model=MODEL, contents="one")
        asyncio.run(client.aio.models.generate_content(model=MODEL, contents="two"))
    assert len(server.requests) == 2 and len(exchanges(mem, "shared")) == 2
    assert server.last_json()["contents"][0] == text("one")


def test_unregister_restores_the_api_client(new_client, server, mem):
    client = new_client()
    api = client._api_client
    before = dict(vars(api))
    mem.register(client)
    assert "_build_request" in vars(api)
    mem.unregister(client)
    assert vars(api).keys() == before.keys()
    with mem.scope(session_id="off"):
        client.models.generate_content(model=MODEL, contents="x")
    assert exchanges(mem, "off") == []


def test_matching_never_imports_the_sdk_and_refuses_classes():
    assert memtap_google.memtap_match_client(client=genai.Client) is None
    assert memtap_google.memtap_match_client(client=object()) is None
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.startswith("google.genai")}
    try:
        assert memtap_google.memtap_match_client(client=object()) is None
        assert "google.genai.client" not in sys.modules
    finally:
        sys.modules.update(saved)


def test_wire_protocol_is_listed():
    (protocol,) = memtap_google.memtap_wire_protocols()
    assert (protocol.name, protocol.provider, protocol.operation) == (
        "google.generate_content",
        "gcp.gemini",
        "chat",
    )


#: (id sent, function name, the call's id as memtap reads it)
CALL_IDS = [
    (None, "read_file", "read_file"),
    ("", "read_file", "read_file"),
    # made up by Gemini CLI for calls the API sent without an id
    ("read_file_1796410651743_0", "read_file", "read_file"),
    ("run_shell_command_1796410651743_12", "run_shell_command", "run_shell_command"),
    ("synth_5f0c########3_1796410651743_1", "glob", "glob"),
    # ids the API sent (or another call's made-up id) are kept
    ("call_9f2b1c", "read_file", "call_9f2b1c"),
    ("glob_1796410651743_0", "read_file", "glob_1796410651743_0"),
    ("read_file_12_0", "read_file", "read_file_12_0"),
]


@pytest.mark.parametrize(("sent", "name", "read"), CALL_IDS)
def test_a_client_made_call_id_reads_as_the_api_s_missing_one(sent, name, read):
    call = {"name": name, "args": {"path": "a"}} | ({"id": sent} if sent is not None else {})
    response = {"name": name, "response": {"output": "x"}} | ({"id": sent} if sent is not None else {})
    view = memtap_google.GenerateContentProtocol().read_request(
        {
            "contents": [
                text("go"),
                {"role": "model", "parts": [{"functionCall": call}]},
                {"role": "user", "parts": [{"functionResponse": response}]},
            ]
        }
    )
    assert view.messages[1].tool_calls[0].id == read
    assert view.messages[2].tool_call_id == read


def test_a_function_response_sent_twice_is_read_once():
    """Gemini CLI 0.61 resends a resumed session's function response twice in one Content."""
    answer = {
        "functionResponse": {"name": "read_file", "id": "read_file_1796410651743_0", "response": {"o": 1}}
    }
    other = {"functionResponse": {"name": "read_file", "id": "call_2", "response": {"o": 2}}}
    view = memtap_google.GenerateContentProtocol().read_request(
        {"contents": [text("go"), {"role": "user", "parts": [answer, answer, other]}]}
    )
    assert [(m.role, m.tool_call_id, m.content) for m in view.messages] == [
        ("user", None, "go"),
        ("tool", "read_file", '{"o": 1}'),
        ("tool", "call_2", '{"o": 2}'),
    ]
