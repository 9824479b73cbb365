"""OpenAI prompt caching with the real SDK: a request naming a ``prompt_cache_key`` gets its
per-turn blocks after the conversation (OpenAI caches the longest common prefix, so
anything that changes before the latest turn would invalidate it); session blocks stay in
the prefix, byte-identical; without a key the placement is the default one."""

from __future__ import annotations

import itertools

import openai
import pytest
from openai_support import API_KEY, user

import memtap
import memtap_openai
from memtap import HistoryBudget, hookimpl
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.wire import SystemBlock


class Blocks:
    def __init__(self) -> None:
        self.turn = itertools.count()

    @hookimpl
    def memtap_request_injections(self, request):
        n = next(self.turn)
        return [
            SystemBlock(text=f"profile v{n}", cache="session_init", source="profile"),
            SystemBlock(text=f"recalled {n}", source="recall"),
        ]


@pytest.fixture
def cached_client(server, store):
    memory = memtap.Memory(
        store,
        plugins=[memtap_openai, Blocks()],
        entry_points=False,
        history=HistoryBudget(max_messages=0),
    )
    client = memory.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    yield client
    memory.close()


def test_chat_with_a_cache_key_puts_per_turn_blocks_last(cached_client, server):
    conversation = [{"role": "system", "content": "You are a coding agent."}]
    sent = []
    for text in ("a", "b", "c"):
        conversation.append(user(text))
        reply = cached_client.chat.completions.create(
            model="m", messages=conversation, prompt_cache_key="session-1"
        )
        conversation.append({"role": "assistant", "content": reply.choices[0].message.content})
        sent.append(server.last_json()["messages"])
    for before, after in itertools.pairwise(sent):
        assert after[: len(before) - 1] == before[:-1]  # everything but the last block: a prefix
    for n, messages in enumerate(sent):
        assert messages[1]["content"].startswith(OPEN_TAG) and "profile v0" in messages[1]["content"]
        assert messages[-1]["role"] == "system" and f"recalled {n}" in messages[-1]["content"]
        assert messages[-2] == conversation[2 * n + 1]  # the app's latest turn, as it was


def test_chat_without_a_cache_key_keeps_the_default_order(cached_client, server):
    cached_client.chat.completions.create(model="m", messages=[user("a")])
    messages = server.last_json()["messages"]
    assert [m["role"] for m in messages] == ["system", "system", "user"]
    assert "profile v0" in messages[0]["content"] and "recalled 0" in messages[1]["content"]


def test_responses_with_a_cache_key_keep_instructions_stable(cached_client, server):
    sent = []
    for text in ("a", "b"):
        cached_client.responses.create(
            model="m", instructions="You are Codex.", input=text, prompt_cache_key="session-1"
        )
        sent.append(server.last_json())
    assert sent[0]["instructions"] == sent[1]["instructions"]
    assert sent[0]["instructions"].startswith("You are Codex.\n\n" + OPEN_TAG)
    assert "recalled" not in sent[0]["instructions"]
    for n, body in enumerate(sent):
        assert body["input"][0]["role"] == "user"  # the string input, as its one-item list
        assert body["input"][-1]["role"] == "system" and f"recalled {n}" in body["input"][-1]["content"]


def test_responses_without_a_cache_key_keep_blocks_in_the_instructions(cached_client, server):
    cached_client.responses.create(model="m", instructions="You are Codex.", input="a")
    body = server.last_json()
    assert body["input"] == "a"
    stable, turn = body["instructions"].split("\n\n" + OPEN_TAG)[1:]
    assert "profile v0" in stable and "recalled 0" in turn


# -- Codex-shaped requests: instructions as developer items ---------------------------------

DEVELOPER = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<skills/>"}]},
]


@pytest.fixture
def history_client(server, store):
    memory = memtap.Memory(store, plugins=[memtap_openai, Blocks()], entry_points=False)
    client = memory.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    yield memory, client
    memory.close()


@pytest.mark.parametrize("key", [None, "thread-1"])
def test_responses_memory_never_goes_ahead_of_the_developer_items(history_client, server, key):
    memory, client = history_client
    extra = {"prompt_cache_key": key} if key else {}
    with memory.scope(session_id="s"):
        client.responses.create(model="m", input=[*DEVELOPER, user("first")], **extra)
        client.responses.create(model="m", input=[*DEVELOPER, user("second")], **extra)
    body = server.last_json()
    assert "instructions" not in body  # no system text of memtap's ahead of the agent's
    items = body["input"]
    assert items[:2] == DEVELOPER
    assert items[2]["role"] == "system" and "profile v0" in items[2]["content"]  # session block
    assert [i.get("content") for i in items[3:5]] == ["first", "You said: first"]  # history
    assert items[-1 if key else 5]["role"] == "system" and "recalled 1" in items[-1 if key else 5]["content"]
    assert user("second") in items[5:]
