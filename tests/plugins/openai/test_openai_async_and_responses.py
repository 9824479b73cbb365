"""AsyncOpenAI and the Responses API through a registered client."""

from __future__ import annotations

import asyncio

import openai
from openai_support import API_KEY, user

from memtap.testing.server import Reply, ToolCallSpec


def test_async_create_injects_and_captures(aclient, server, mem):
    async def main():
        with mem.scope(session_id="as"):
            await aclient.chat.completions.create(model="m", messages=[user("first")])
            await aclient.chat.completions.create(model="m", messages=[user("second")])

    asyncio.run(main())
    assert [m["content"] for m in server.last_json()["messages"]] == ["first", "You said: first", "second"]
    assert [m.content for m in mem.history("as")] == [
        "first",
        "You said: first",
        "second",
        "You said: second",
    ]


def test_async_stream_is_captured_and_usage_chunk_hidden(aclient, server, mem):
    server.script(Reply(text="async streamed words", chunks=3))

    async def main():
        with mem.scope(session_id="ast"):
            stream = await aclient.chat.completions.create(model="m", messages=[user("q")], stream=True)
            assert isinstance(stream, openai.AsyncStream)
            return [c async for c in stream]

    chunks = asyncio.run(main())
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "async streamed words"
    assert [m.content for m in mem.history("ast")] == ["q", "async streamed words"]


def test_async_stream_close_finalises_once(aclient, mem):
    async def main():
        with mem.scope(session_id="acl"):
            stream = await aclient.chat.completions.create(model="m", messages=[user("q")], stream=True)
            await stream.close()
            await stream.close()

    asyncio.run(main())
    mem.flush()
    (ex,) = mem.store.exchanges(session_id="acl")
    assert ex.status == "partial"


def test_async_tasks_keep_their_own_scopes(server, mem):
    async def main():
        client = mem.register(openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=API_KEY))

        async def conversation(i: int) -> None:
            with mem.scope(entity_id=f"user{i}", session_id=f"s{i}"):
                for turn in range(3):
                    await client.chat.completions.create(model="m", messages=[user(f"u{i} t{turn}")])
                    await asyncio.sleep(0)

        await asyncio.gather(*(conversation(i) for i in range(20)))

    asyncio.run(main())
    for request in server.requests:
        owners = {m["content"].split()[0].removeprefix("You said: ") for m in request.json["messages"]}
        texts = " ".join(m["content"] for m in request.json["messages"])
        ids = {w for w in texts.replace(":", " ").split() if w.startswith("u") and w[1:].isdigit()}
        assert len(ids) == 1, f"one request mixed conversations: {texts}"
        assert owners
    for i in range(20):
        contents = [m.content for m in mem.history(f"s{i}", entity_id=f"user{i}")]
        assert contents == [x for t in range(3) for x in (f"u{i} t{t}", f"You said: u{i} t{t}")]


def test_responses_history_goes_into_input(client, server, mem):
    with mem.scope(session_id="r"):
        first = client.responses.create(model="m", input="I like green tea")
        assert first.output_text == "You said: I like green tea"
        client.responses.create(model="m", input="what do I like?", instructions="Answer briefly.")
    body = server.last_json()
    assert body["instructions"] == "Answer briefly."
    assert body["input"] == [
        {"role": "user", "content": "I like green tea"},
        {"role": "assistant", "content": "You said: I like green tea"},
        {"role": "user", "content": "what do I like?"},
    ]
    mem.flush()
    exchanges = list(mem.store.exchanges(session_id="r"))
    assert exchanges[1].system == "Answer briefly."
    assert exchanges[1].usage.input_tokens is not None


def test_responses_with_server_side_state_get_no_history(client, server, mem):
    with mem.scope(session_id="prev"):
        first = client.responses.create(model="m", input="hello")
        client.responses.create(model="m", input="and now?", previous_response_id=first.id)
    assert server.last_json()["input"] == "and now?"


def test_responses_stream_and_helper_are_captured(client, server, mem):
    server.script(Reply(text="streamed response"), Reply(text="helper response"))
    with mem.scope(session_id="rs"):
        events = list(client.responses.create(model="m", input="one", stream=True))
        assert events[-1].type == "response.completed"
        with client.responses.stream(model="m", input="two") as stream:
            for _event in stream:
                pass
            assert stream.get_final_response().output_text == "helper response"
    assert [m.content for m in mem.history("rs")] == ["one", "streamed response", "two", "helper response"]


def test_responses_function_calls_are_captured_and_replayed(client, server, mem):
    server.script(Reply(tool_calls=(ToolCallSpec(name="clock", arguments="{}", id="fc_1"),)))
    with mem.scope(session_id="rf"):
        first = client.responses.create(model="m", input="what time is it?")
        call = next(item for item in first.output if item.type == "function_call")
        client.responses.create(
            model="m",
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "noon"}],
        )
        client.responses.create(model="m", input="thanks")
    items = server.last_json()["input"]
    kinds = [i.get("type", i.get("role")) for i in items]
    assert kinds == ["user", "function_call", "function_call_output", "assistant", "user"]
    assert items[1]["call_id"] == call.call_id and items[2]["output"] == "noon"


def test_async_responses(aclient, server, mem):
    async def main():
        with mem.scope(session_id="ar"):
            await aclient.responses.create(model="m", input="a")
            await aclient.responses.create(model="m", input="b")

    asyncio.run(main())
    assert server.last_json()["input"][0] == {"role": "user", "content": "a"}
