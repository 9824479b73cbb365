"""Through the proxy: a client resending its conversation past the history cache stores each
turn once and never gets a message twice; an unanswered tool call never breaks the session
(issue #13, items 1 and 2). Real SDKs, a DuckDB file, the validating scripted upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from proxy_support import API_KEY, make_memory, needs_anthropic

import memtap
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec
from memtap_duckdb.store import DuckDBStore
from memtap_proxy import ProxyThread

TURNS = 150


# Own mem: on a DuckDB file, not the in-process store.
@pytest.fixture
def mem(tmp_path: Path) -> Iterator[memtap.Memory]:
    """The proxy's Memory (the conftest's `proxy` fixture uses it) on a DuckDB file."""
    memory = make_memory(DuckDBStore(tmp_path / "proxy.duckdb"), spool=False)
    yield memory
    memory.close()


def _no_message_twice(upstream: ScriptedModelServer) -> None:
    for number, request in enumerate(upstream.requests):
        messages = [json.dumps(m, sort_keys=True) for m in request.json["messages"]]
        assert len(messages) == len(set(messages)), f"request {number} carries a message twice"


def test_openai_client_resending_everything_stores_each_turn_once(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    conversation: list[dict[str, Any]] = []
    for turn in range(TURNS):
        conversation.append({"role": "user", "content": f"question {turn}"})
        reply = client.chat.completions.create(model="m", messages=conversation, stream=turn % 10 == 9)
        if turn % 10 == 9:
            text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
        else:
            text = reply.choices[0].message.content
        conversation.append({"role": "assistant", "content": text})
    assert mem.flush(60)
    stored = mem.history("default")
    assert len(stored) == 2 * TURNS
    assert [m.content for m in stored[::2]] == [f"question {t}" for t in range(TURNS)]
    _no_message_twice(upstream)
    assert [len(r.json["messages"]) for r in upstream.requests] == [2 * t + 1 for t in range(TURNS)]


@needs_anthropic
def test_anthropic_client_resending_everything_stores_each_turn_once(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url, api_key=API_KEY, max_retries=0)
    conversation: list[dict[str, Any]] = []
    turns = 130
    for turn in range(turns):
        conversation.append({"role": "user", "content": f"question {turn}"})
        reply = client.messages.create(model="claude", max_tokens=32, messages=conversation)
        conversation.append({"role": "assistant", "content": reply.content[0].text})
    assert mem.flush(60)
    assert len(mem.history("default")) == 2 * turns
    _no_message_twice(upstream)


@needs_anthropic
def test_anthropic_unanswered_tool_call_never_breaks_the_session(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory
) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url, api_key=API_KEY, max_retries=0)
    upstream.script(Reply(tool_calls=(ToolCallSpec(name="get_weather", arguments='{"city": "Oslo"}'),)))
    first = client.messages.create(
        model="claude", max_tokens=32, messages=[{"role": "user", "content": "Weather in Oslo?"}]
    )
    assert first.stop_reason == "tool_use"
    for i in range(3):  # the app moves on and sends only its new messages
        client.messages.create(
            model="claude", max_tokens=32, messages=[{"role": "user", "content": f"Something else {i}"}]
        )
    assert upstream.rejected == []
    assert all('"tool_use"' not in json.dumps(r.json) for r in upstream.requests[1:])
