"""Prompt-cache friendly injection: the cached prefix is byte-identical turn after turn."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest
from proxy_support import HAS_ANTHROPIC, make_memory

from memtap import HistoryBudget, hookimpl
from memtap.wire import SystemBlock
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

BREAKPOINT = b'"cache_control":{"type":"ephemeral"}'


class StableAndPerTurn:
    """A session-stable profile block and a recall block that changes every turn."""

    def __init__(self) -> None:
        self.turn = itertools.count()

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[SystemBlock]:
        return [
            SystemBlock(text="Alice is a Python developer.", cache="session_init", slot="persona"),
            SystemBlock(text=f"recalled for turn {next(self.turn)}", cache="per_turn"),
        ]


@pytest.fixture
def cache_proxy(upstream):
    memory = make_memory(plugins=[StableAndPerTurn()], history=HistoryBudget(max_messages=0))
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, memory)) as thread:
        yield thread
    memory.close()


@pytest.mark.skipif(not HAS_ANTHROPIC, reason="memtap-anthropic is not installed")
def test_anthropic_prefix_up_to_the_last_breakpoint_is_stable(cache_proxy, upstream) -> None:
    system = [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "# Memory\nnotes", "cache_control": {"type": "ephemeral"}},
    ]
    turns = [
        [{"role": "user", "content": "first"}],
        [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
    ]
    bodies = []
    for messages in turns:
        body = {"model": "c", "max_tokens": 10, "system": system, "messages": messages}
        httpx.post(cache_proxy.url + "/v1/messages", json=body)
        bodies.append(upstream.requests[-1].body)
    end = bodies[0].rfind(BREAKPOINT) + len(BREAKPOINT)
    assert end > len(BREAKPOINT) and bodies[1][:end] == bodies[0][:end]
    sent = [json.loads(b)["system"] for b in bodies]
    assert sent[0][:2] == system and sent[1][:2] == system  # the app's blocks untouched
    assert sent[0][2] == sent[1][2]  # the session_init block is identical every turn
    assert sent[0][3] != sent[1][3]  # the per-turn block comes after it


def test_openai_chat_stable_block_keeps_the_prefix(cache_proxy, upstream) -> None:
    system = {"role": "system", "content": "You are a coding agent."}
    bodies = []
    for messages in ([system, {"role": "user", "content": "a"}], [system, {"role": "user", "content": "b"}]):
        httpx.post(cache_proxy.url + "/v1/chat/completions", json={"model": "m", "messages": messages})
        bodies.append(json.loads(upstream.requests[-1].body)["messages"])
    assert bodies[0][:2] == bodies[1][:2]  # app system + session_init block: a stable prefix
    assert "Python developer" in bodies[0][1]["content"]
    assert bodies[0][2] != bodies[1][2]  # per-turn recall after it
