"""Bedrock specifics: exact request parameters through botocore's Stubber, system-level
injection, streams, pass-through of other model families, restore, secrets."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from bedrock_server import ACCESS_KEY, MODEL, SECRET_KEY, make_bedrock
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from botocore.stub import Stubber

import memtap
import memtap_bedrock
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.wire import SystemBlock
from memtap.testing.server import Reply, ToolCallSpec


def text_message(role, text):
    return {"role": role, "content": [{"text": text}]}


def converse_reply(text, usage=(5, 3)):
    return {
        "output": {"message": text_message("assistant", text)},
        "stopReason": "end_turn",
        "usage": {"inputTokens": usage[0], "outputTokens": usage[1], "totalTokens": sum(usage)},
        "metrics": {"latencyMs": 1},
    }


def invoke_reply(text):
    data = json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 4, "output_tokens": 2},
        }
    ).encode()
    return {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"}


def stored(mem, session):
    assert mem.flush(10)
    return [(m.role, m.content) for m in mem.history(session)]


class Remembers:
    """A tiny injector plugin: one memory block for every request."""

    def __init__(self, cache="per_turn"):
        self.cache = cache

    @memtap.hookimpl
    def memtap_request_injections(self, request):
        return [SystemBlock(text="Alice lives in Tokyo", cache=self.cache)]


# -- Stubber: exactly what botocore is asked to send ------------------------------------------


def test_converse_history_through_stubber(mem):
    client = mem.register(make_bedrock())
    with Stubber(client) as stub, mem.scope(entity_id="a", session_id="stub"):
        first = [text_message("user", "I am Ada")]
        stub.add_response("converse", converse_reply("Hello Ada"), {"modelId": MODEL, "messages": first})
        second = [text_message("user", "who am I?")]
        expected = [*first, text_message("assistant", "Hello Ada"), *second]
        stub.add_response("converse", converse_reply("Ada"), {"modelId": MODEL, "messages": expected})
        client.converse(modelId=MODEL, messages=first)
        assert (
            client.converse(modelId=MODEL, messages=second)["output"]["message"]["content"][0]["text"]
            == "Ada"
        )
        stub.assert_no_pending_responses()
    assert stored(mem, "stub") == [
        ("user", "I am Ada"),
        ("assistant", "Hello Ada"),
        ("user", "who am I?"),
        ("assistant", "Ada"),
    ]
    (ex, _) = mem.store.exchanges(session_id="stub")
    assert (ex.usage.input_tokens, ex.usage.output_tokens, ex.provider) == (5, 3, "aws.bedrock")
    assert ex.request_model == MODEL


def test_invoke_model_body_through_stubber(mem):
    client = mem.register(make_bedrock())
    original = (
        b'{"anthropic_version": "bedrock-2023-05-31",  "max_tokens": 50,'
        b' "messages": [{"role": "user", "content": "hi"}]}'
    )
    with Stubber(client) as stub, mem.scope(session_id="invoke-stub"):
        # nothing to inject yet: the app's bytes go out untouched, whitespace and all
        stub.add_response("invoke_model", invoke_reply("hello"), {"modelId": MODEL, "body": original})
        # history written as for the Anthropic API (one codec): plain text as strings
        injected = {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 50,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "again"},
            ],
        }
        body = json.dumps(injected, separators=(",", ":")).encode()
        stub.add_response("invoke_model", invoke_reply("yes"), {"modelId": MODEL, "body": body})
        reply = client.invoke_model(modelId=MODEL, body=original)
        assert isinstance(reply["body"], StreamingBody)
        assert json.loads(reply["body"].read())["content"][0]["text"] == "hello"
        again = json.loads(original)
        again["messages"][0]["content"] = "again"
        client.invoke_model(modelId=MODEL, body=json.dumps(again))
        stub.assert_no_pending_responses()
    assert stored(mem, "invoke-stub")[-2:] == [("user", "again"), ("assistant", "yes")]


def test_other_model_families_pass_through(mem):
    client = mem.register(make_bedrock())
    titan = json.dumps({"inputText": "hi", "textGenerationConfig": {"maxTokenCount": 10}})
    data = b'{"results": [{"outputText": "yo"}]}'
    response = {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"}
    with Stubber(client) as stub, mem.scope(session_id="titan"):
        stub.add_response("invoke_model", response, {"modelId": "amazon.titan-text", "body": titan})
        assert client.invoke_model(modelId="amazon.titan-text", body=titan)["body"].read() == data
    assert stored(mem, "titan") == []


def test_file_like_body(mem, bedrock_server):
    client = mem.register(make_bedrock(bedrock_server.base_url))
    payload = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "x"}],
    }
    with mem.scope(session_id="file"):
        client.invoke_model(modelId=MODEL, body=io.BytesIO(json.dumps(payload).encode()))
    assert stored(mem, "file") == [("user", "x"), ("assistant", "You said: x")]


# -- system-level injection -------------------------------------------------------------------


@pytest.fixture
def remembering(store):
    memory = memtap.Memory(store, plugins=[memtap_bedrock, Remembers()], entry_points=False)
    yield memory
    memory.close()


def test_converse_system_blocks_are_appended(remembering, bedrock_server):
    client = remembering.register(make_bedrock(bedrock_server.base_url))
    system = [{"text": "You are terse."}]
    client.converse(modelId=MODEL, messages=[text_message("user", "hi")], system=system)
    sent = bedrock_server.last_json()
    assert sent["system"][:1] == system and len(sent["system"]) == 2
    assert (
        sent["system"][1]["text"].startswith(OPEN_TAG) and "Alice lives in Tokyo" in sent["system"][1]["text"]
    )
    assert sent["messages"] == [text_message("user", "hi")]
    assert system == [{"text": "You are terse."}]  # the app's list


@pytest.mark.parametrize("cache", ["session_init", "per_turn"])
def test_converse_with_cache_points_keeps_the_cached_prefix(store, bedrock_server, cache):
    memory = memtap.Memory(store, plugins=[memtap_bedrock, Remembers(cache)], entry_points=False)
    client = memory.register(make_bedrock(bedrock_server.base_url))
    system = [{"text": "You are terse."}, {"cachePoint": {"type": "default"}}]
    client.converse(modelId=MODEL, messages=[text_message("user", "hi")], system=system)
    sent = bedrock_server.last_json()
    if cache == "session_init":  # stable: after the app's cache point, in the system
        assert sent["system"][:2] == system and len(sent["system"]) == 3
        assert "Alice lives in Tokyo" in sent["system"][2]["text"]
        assert sent["messages"] == [text_message("user", "hi")]
    else:  # per turn: after the latest user message's blocks, never in the cached prefix
        assert sent["system"] == system
        (message,) = sent["messages"]
        assert message["content"][0] == {"text": "hi"} and len(message["content"]) == 2
        assert message["content"][1]["text"].startswith(OPEN_TAG)
        assert "Alice lives in Tokyo" in message["content"][1]["text"]
    memory.close()


@pytest.mark.parametrize(
    "system",
    [
        None,
        "You are terse.",
        [{"type": "text", "text": "You are terse."}],
    ],
)
def test_anthropic_system_injection(remembering, bedrock_server, system):
    client = remembering.register(make_bedrock(bedrock_server.base_url))
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "x"}],
    }
    if system is not None:
        body["system"] = system
    client.invoke_model(modelId=MODEL, body=json.dumps(body))
    sent = bedrock_server.last_json()
    assert "modelId" not in sent and "stream" not in sent
    if isinstance(system, list):
        assert sent["system"][0] == system[0]
        assert "Alice lives in Tokyo" in sent["system"][1]["text"]
    else:
        assert isinstance(sent["system"], str) and "Alice lives in Tokyo" in sent["system"]
        assert sent["system"].startswith(system or OPEN_TAG)


def test_anthropic_per_turn_block_leaves_the_cached_system_alone(remembering, bedrock_server):
    client = remembering.register(make_bedrock(bedrock_server.base_url))
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 9,
        "system": system,
        "messages": [{"role": "user", "content": "x"}],
    }
    client.invoke_model(modelId=MODEL, body=json.dumps(body))
    sent = bedrock_server.last_json()
    assert sent["system"] == system  # cache_control stays where the app put it, nothing added
    (message,) = sent["messages"]
    head, block = message["content"].split("\n\n", 1)  # a string stays a string
    assert head == "x" and block.startswith(OPEN_TAG) and "Alice lives in Tokyo" in block


# -- streams ---------------------------------------------------------------------------------


def test_converse_stream_events_are_unchanged(mem, bedrock_server):
    bare = make_bedrock(bedrock_server.base_url)
    bedrock_server.script(Reply(text="one two three", chunks=3))
    expected = list(bare.converse_stream(modelId=MODEL, messages=[text_message("user", "go")])["stream"])
    client = mem.register(make_bedrock(bedrock_server.base_url))
    bedrock_server.script(Reply(text="one two three", chunks=3))
    with mem.scope(session_id="same"):
        stream = client.converse_stream(modelId=MODEL, messages=[text_message("user", "go")])["stream"]
        assert type(stream).__name__ == "EventStream"
        assert list(stream) == expected


def test_converse_stream_tool_use(mem, bedrock_server):
    bedrock_server.script(
        Reply(tool_calls=[ToolCallSpec(name="weather", arguments='{"city": "Paris"}', id="tu_1")])
    )
    client = mem.register(make_bedrock(bedrock_server.base_url))
    with mem.scope(session_id="stream-tool"):
        list(client.converse_stream(modelId=MODEL, messages=[text_message("user", "weather?")])["stream"])
    assert mem.flush(10)
    (ex,) = mem.store.exchanges(session_id="stream-tool")
    assert [(c.id, c.name, c.arguments) for c in ex.output[0].tool_calls] == [
        ("tu_1", "weather", '{"city": "Paris"}')
    ]
    assert ex.finish_reasons == ("tool_use",) and ex.stream


def test_invoke_stream_usage_and_close(mem, bedrock_server):
    client = mem.register(make_bedrock(bedrock_server.base_url))
    body = json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    bedrock_server.script(
        Reply(text="a b c", input_tokens=13, output_tokens=4), Reply(text="d e f g", chunks=4)
    )
    with mem.scope(session_id="istream"):
        list(client.invoke_model_with_response_stream(modelId=MODEL, body=body)["body"])
    with mem.scope(session_id="iclose"):
        stream = client.invoke_model_with_response_stream(modelId=MODEL, body=body)["body"]
        next(iter(stream))
        stream.close()
    assert mem.flush(10)
    (ex,) = mem.store.exchanges(session_id="istream")
    assert (ex.usage.input_tokens, ex.usage.output_tokens, ex.status) == (13, 4, "ok")
    assert ex.response_model == MODEL
    assert [e.status for e in mem.store.exchanges(session_id="iclose")] == ["partial"]


def test_service_error_is_raised_and_not_stored(mem, bedrock_server):
    bedrock_server.script(Reply(status=400, text="bad"))
    client = mem.register(make_bedrock(bedrock_server.base_url))
    with mem.scope(session_id="err"), pytest.raises(ClientError):
        client.converse(modelId=MODEL, messages=[text_message("user", "x")])
    assert stored(mem, "err") == []


# -- registration -------------------------------------------------------------------------------


def test_unregister_deletes_the_instance_attributes(mem):
    client = make_bedrock()
    methods = ("converse", "converse_stream", "invoke_model", "invoke_model_with_response_stream")
    mem.register(client)
    assert all(name in vars(client) for name in methods)
    mem.unregister(client)
    assert not any(name in vars(client) for name in methods)
    assert client.converse.__func__ is type(client).converse


def test_other_clients_are_not_matched():
    import boto3

    s3 = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY
    )
    assert memtap_bedrock.memtap_match_client(client=s3) is None
    assert memtap_bedrock.memtap_match_client(client=object()) is None


def test_credentials_are_never_stored(mem, bedrock_server, store):
    client = mem.register(make_bedrock(bedrock_server.base_url))
    with mem.scope(session_id="creds"):
        client.converse(modelId=MODEL, messages=[text_message("user", "hi")])
    assert mem.flush(10)
    dumped = json.dumps(
        [memtap.protocol.model.converter.unstructure(e) for e in store.exchanges()], default=str
    )
    assert ACCESS_KEY not in dumped and SECRET_KEY not in dumped
    assert ACCESS_KEY in bedrock_server.requests[-1].headers["authorization"]


def test_plugin_never_imports_boto3():
    code = (
        "import sys, memtap_bedrock\n"
        "assert memtap_bedrock.memtap_match_client(client=object()) is None\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
