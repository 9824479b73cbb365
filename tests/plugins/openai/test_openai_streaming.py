"""Streaming through a registered openai client: chunks unchanged and at once, finalised
exactly once on end, close, break and error, usage captured without showing the caller a
chunk it did not ask for."""

from __future__ import annotations

import openai
import pytest
from openai_support import user

from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply, ToolCallSpec

DROP = {"id", "created"}


def chunk_dicts(stream):
    return [{k: v for k, v in c.to_dict().items() if k not in DROP} for c in stream]


def stored(mem, session):
    mem.flush()
    return list(mem.store.exchanges(session_id=session))


def test_chunks_reach_the_caller_exactly_as_from_a_bare_client(client, bare, server, mem):
    server.script(Reply(text="alpha beta gamma", chunks=3), Reply(text="alpha beta gamma", chunks=3))
    with mem.scope(session_id="st"):
        tapped = client.chat.completions.create(model="m", messages=[user("q")], stream=True)
        assert isinstance(tapped, openai.Stream)
        tapped_chunks = chunk_dicts(tapped)
    plain_chunks = chunk_dicts(bare.chat.completions.create(model="m", messages=[user("q")], stream=True))
    assert tapped_chunks == plain_chunks
    assert all(c["choices"] for c in tapped_chunks), "the usage-only chunk memtap asked for is hidden"


def test_usage_is_requested_and_captured_when_the_caller_did_not_ask(client, server, mem):
    server.script(Reply(text="streamed", input_tokens=9, output_tokens=3))
    with mem.scope(session_id="use"):
        list(client.chat.completions.create(model="m", messages=[user("q")], stream=True))
    assert server.last_json()["stream_options"] == {"include_usage": True}
    (ex,) = stored(mem, "use")
    assert (ex.usage.input_tokens, ex.usage.output_tokens) == (9, 3)
    assert ex.stream and ex.status == "ok" and ex.finish_reasons == ("stop",)


def test_callers_own_usage_request_is_respected_and_its_chunk_shown(client, server, mem):
    with mem.scope(session_id="own"):
        chunks = list(
            client.chat.completions.create(
                model="m", messages=[user("q")], stream=True, stream_options={"include_usage": True}
            )
        )
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    with mem.scope(session_id="off"):
        list(
            client.chat.completions.create(
                model="m", messages=[user("q")], stream=True, stream_options={"include_usage": False}
            )
        )
    assert server.last_json()["stream_options"] == {"include_usage": False}


def test_streamed_text_is_stored_like_the_non_streamed_text(client, server, mem):
    server.script(Reply(text="one two three four", chunks=4), Reply(text="one two three four"))
    with mem.scope(session_id="a"):
        list(client.chat.completions.create(model="m", messages=[user("q")], stream=True))
    with mem.scope(session_id="b"):
        client.chat.completions.create(model="m", messages=[user("q")])
    assert mem.history("a") == mem.history("b")


def test_streamed_tool_calls_are_captured(client, server, mem):
    server.script(
        Reply(tool_calls=(ToolCallSpec(name="lookup", arguments='{"q": "tokyo weather"}', id="c1"),))
    )
    with mem.scope(session_id="tc"):
        list(client.chat.completions.create(model="m", messages=[user("q")], stream=True))
    (ex,) = stored(mem, "tc")
    (call,) = ex.output[0].tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "lookup", '{"q": "tokyo weather"}')
    assert ex.finish_reasons == ("tool_calls",)


def test_break_out_of_the_loop_finalises_once_as_partial(client, server, mem):
    server.script(Reply(text="a b c d e f", chunks=6))
    with mem.scope(session_id="brk"):
        stream = client.chat.completions.create(model="m", messages=[user("q")], stream=True)
        for _chunk in stream:
            break
        (ex,) = stored(mem, "brk")
        assert ex.status == "partial"
        stream.close()
        del stream
        collect_garbage()
    assert len(stored(mem, "brk")) == 1


def test_close_before_reading_finalises_once(client, mem):
    with mem.scope(session_id="cls"):
        stream = client.chat.completions.create(model="m", messages=[user("q")], stream=True)
        stream.close()
        stream.close()
    (ex,) = stored(mem, "cls")
    assert ex.status == "partial" and ex.input[0].content == "q"


def test_context_manager_exit_finalises(client, mem):
    with (
        mem.scope(session_id="cm"),
        client.chat.completions.create(model="m", messages=[user("q")], stream=True) as stream,
    ):
        next(stream)
    assert len(stored(mem, "cm")) == 1


def test_stream_cut_by_the_server_is_captured_with_the_error(client, server, mem):
    server.script(Reply(text="a b c d e f", chunks=6, truncate_stream_after=3))
    with mem.scope(session_id="cut"):
        stream = client.chat.completions.create(model="m", messages=[user("q")], stream=True)
        received = []
        with pytest.raises(Exception):  # noqa: B017 - the SDK's own error type for a cut connection
            for chunk in stream:
                received.append(chunk)
    (ex,) = stored(mem, "cut")
    assert ex.status == "error" and ex.error
    text = "".join(c.choices[0].delta.content or "" for c in received if c.choices)
    assert ex.output[0].content == text


def test_stream_helper_is_captured_once(client, server, mem):
    server.script(Reply(text="helper text"))
    with (
        mem.scope(session_id="helper"),
        client.chat.completions.stream(model="m", messages=[user("q")]) as stream,
    ):
        for _event in stream:
            pass
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "helper text"
    (ex,) = stored(mem, "helper")
    assert ex.output[0].content == "helper text"


def test_first_chunk_is_not_held_back(client, server, mem):
    server.script(Reply(text="x y", chunks=2))
    with mem.scope(session_id="first"):
        stream = client.chat.completions.create(model="m", messages=[user("q")], stream=True)
        first = next(stream)
        assert first.choices[0].delta.role == "assistant"
        assert stored(mem, "first") == [], "nothing is captured before the stream ends"
        list(stream)
    assert len(stored(mem, "first")) == 1
