"""Prompt-cache friendly injection: the cached prefix is byte-identical turn after turn.

``session_init`` blocks are computed once per session and sent with the same bytes every
turn (in the system, after the app's breakpoints or at a known agent's slot); per-turn
blocks go after everything a prompt cache can hold when the request uses one."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from lossless_support import ordered, strip
from proxy_support import HAS_ANTHROPIC, make_memory, needs_anthropic

import memtap_agents
from memtap import HistoryBudget, hookimpl
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.wire import SystemBlock
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

BREAKPOINT = b'"cache_control":{"type":"ephemeral"}'
GOLDEN = Path(__file__).parent / "golden"


class StableAndPerTurn:
    """A session-stable profile block whose source changes every turn (memtap must keep the
    first), and a recall block that changes every turn."""

    def __init__(self, slot: str = "persona") -> None:
        self.turn = itertools.count()
        self.slot = slot

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[SystemBlock]:
        n = next(self.turn)
        return [
            SystemBlock(text=f"Alice is a Python developer (v{n}).", cache="session_init", slot=self.slot),
            SystemBlock(text=f"recalled for turn {n}", cache="per_turn"),
        ]


def proxy_with(upstream: Any, *plugins: object) -> tuple[Any, Any]:
    memory = make_memory(plugins=list(plugins), history=HistoryBudget(max_messages=0))
    config = ProxyConfig(
        openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url, session_id="default"
    )
    return memory, ProxyThread(Proxy(config, memory))


@pytest.fixture
def cache_proxy(upstream):
    memory, thread = proxy_with(upstream, StableAndPerTurn())
    with thread:
        yield thread
    memory.close()


@pytest.fixture
def agent_proxy(upstream):
    memory, thread = proxy_with(upstream, memtap_agents, StableAndPerTurn(slot="memory"))
    with thread:
        yield thread
    memory.close()


def post(proxy: Any, upstream: Any, path: str, body: dict[str, Any], **headers: str) -> bytes:
    r = httpx.post(proxy.url + path, json=body, headers=headers)
    assert r.status_code == 200, r.text
    return upstream.requests[-1].body


# -- Anthropic -----------------------------------------------------------------------------


@needs_anthropic
def test_anthropic_prefix_up_to_the_last_breakpoint_is_stable(cache_proxy, upstream) -> None:
    system = [
        {"type": "text", "text": "You are a support bot.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "# Policies\nnotes", "cache_control": {"type": "ephemeral"}},
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
        bodies.append(post(cache_proxy, upstream, "/v1/messages", body))
    end = bodies[0].rfind(BREAKPOINT) + len(BREAKPOINT)
    assert end > len(BREAKPOINT) and bodies[1][:end] == bodies[0][:end]
    sent = [json.loads(b) for b in bodies]
    assert sent[0]["system"][:2] == system and sent[1]["system"][:2] == system  # untouched
    assert len(sent[0]["system"]) == len(sent[1]["system"]) == 3  # only the session block added
    assert sent[0]["system"][2] == sent[1]["system"][2]  # identical every turn
    assert "(v0)" in sent[1]["system"][2]["text"]  # computed once: turn 2's v1 is not used
    # the per-turn block went to the end of the latest user message
    assert sent[0]["messages"][-1]["content"].startswith("first\n\n" + OPEN_TAG)
    assert sent[1]["messages"][:2] == turns[1][:2]
    assert sent[1]["messages"][2]["content"].startswith("second\n\n" + OPEN_TAG)
    assert "turn 1" in sent[1]["messages"][2]["content"]


def cache_blocks(body: dict[str, Any]) -> tuple[list[str], int]:
    """An Anthropic body as the sequence of blocks its prompt cache sees (tools, system,
    then each message's content blocks; ``cache_control`` left out), and how many of them
    the last breakpoint covers."""
    blocks: list[str] = []
    end = 0

    def add(kind: str, block: Any) -> None:
        nonlocal end
        if isinstance(block, dict):
            if "cache_control" in block:
                end = len(blocks) + 1
            block = {k: v for k, v in block.items() if k != "cache_control"}
        blocks.append(kind + json.dumps(block, ensure_ascii=False))

    for tool in body.get("tools") or ():
        add("tool:", tool)
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or ():
        add("system:", block)
    for message in body["messages"]:
        content = message["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            add(message["role"] + ":", block)
    return blocks, end


@needs_anthropic
def test_claude_code_conversation_keeps_every_cached_prefix(agent_proxy, upstream) -> None:
    """Claude Code moves its message breakpoint to the newest turn: what the previous
    request cached must still be the start of the next one, memtap's blocks included."""
    golden = json.loads((GOLDEN / "anthropic_claude_code.json").read_bytes())
    conversation: list[dict[str, Any]] = []
    sent = []
    for n, text in enumerate(["Fix the failing test.", "Now run it.", "Thanks, commit it."]):
        if conversation:
            conversation.append({"role": "assistant", "content": [{"type": "text", "text": f"done {n}"}]})
        for message in conversation:  # only the newest turn carries the breakpoint
            for block in message["content"]:
                block.pop("cache_control", None)
        turn = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        conversation.append({"role": "user", "content": [turn]})
        body = {**golden, "messages": json.loads(json.dumps(conversation)), "stream": False}
        sent.append(json.loads(post(agent_proxy, upstream, "/v1/messages", body)))
        assert ordered(strip("anthropic.messages", sent[-1], body)) == ordered(body)
    for before, after in itertools.pairwise(sent):
        cached, end = cache_blocks(before)
        assert end > 0 and cache_blocks(after)[0][:end] == cached[:end]
    # the session block sits in Claude Code's "# Memory" section, the same every turn
    texts = [body["system"][1]["text"] for body in sent]
    assert texts[0] == texts[1] == texts[2] != golden["system"][1]["text"]
    memory_section = texts[0].split("# Memory", 1)[1].split("# Environment", 1)[0]
    assert "Alice is a Python developer (v0)." in memory_section
    assert [b["system"][1]["cache_control"] for b in sent] == [{"type": "ephemeral"}] * 3
    # per-turn recall: after the newest turn's breakpoint
    assert [b["messages"][-1]["content"][-1]["text"].count("recalled for turn") for b in sent] == [1, 1, 1]
    assert all("cache_control" not in b["messages"][-1]["content"][-1] for b in sent)


@needs_anthropic
def test_session_blocks_are_kept_per_session(cache_proxy, upstream) -> None:
    body = {"model": "c", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    first = json.loads(post(cache_proxy, upstream, "/v1/messages", body, **{"x-memtap-session": "a"}))
    again = json.loads(post(cache_proxy, upstream, "/v1/messages", body, **{"x-memtap-session": "a"}))
    other = json.loads(post(cache_proxy, upstream, "/v1/messages", body, **{"x-memtap-session": "b"}))
    stable = [b["system"].split("\n\n" + OPEN_TAG)[0] for b in (first, again, other)]
    assert stable[0] == stable[1] and "(v0)" in stable[0]
    assert "(v2)" in stable[2]  # a new session computes its own


class GrowingRecall:
    """A hybrid recall block that finds one more fact every turn."""

    FACTS = ["lives in Tokyo", "has a beagle", "plays go"]

    def __init__(self) -> None:
        self.turn = 0

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[SystemBlock]:
        self.turn += 1
        lines = ["Facts remembered:", *(f"- {f}" for f in self.FACTS[: self.turn])]
        return [SystemBlock(text="\n".join(lines), cache="hybrid", source="recall")]


@needs_anthropic
def test_hybrid_keeps_the_first_block_and_sends_only_new_facts_per_turn(upstream) -> None:
    memory, thread = proxy_with(upstream, GrowingRecall())
    system = [{"type": "text", "text": "You are a bot.", "cache_control": {"type": "ephemeral"}}]
    sent = []
    with thread:
        for text in ("a", "b", "c"):
            body = {
                "model": "c",
                "max_tokens": 9,
                "system": system,
                "messages": [{"role": "user", "content": text}],
            }
            sent.append(json.loads(post(thread, upstream, "/v1/messages", body)))
    memory.close()
    assert sent[0]["system"] == sent[1]["system"] == sent[2]["system"]
    assert "lives in Tokyo" in sent[0]["system"][1]["text"] and "beagle" not in sent[0]["system"][1]["text"]
    tails = [b["messages"][-1]["content"] for b in sent]
    assert tails[0] == "a"  # nothing new on the first turn
    assert "has a beagle" in tails[1] and "Tokyo" not in tails[1]
    assert "plays go" in tails[2] and "has a beagle" in tails[2] and "Tokyo" not in tails[2]


# -- OpenAI: automatic prefix caching, signalled by a cache key -------------------------------


def test_openai_chat_stable_block_keeps_the_prefix(cache_proxy, upstream) -> None:
    system = {"role": "system", "content": "You are a coding agent."}
    bodies = []
    for messages in ([system, {"role": "user", "content": "a"}], [system, {"role": "user", "content": "b"}]):
        body = {"model": "m", "messages": messages}
        bodies.append(json.loads(post(cache_proxy, upstream, "/v1/chat/completions", body))["messages"])
    assert bodies[0][:2] == bodies[1][:2]  # app system + session_init block: a stable prefix
    assert "Python developer (v0)" in bodies[0][1]["content"]
    assert bodies[0][2] != bodies[1][2]  # per-turn recall after it (no cache key: before the turn)
    assert [m["role"] for m in bodies[0]] == ["system", "system", "system", "user"]


def test_openai_chat_with_a_cache_key_keeps_the_conversation_prefix(cache_proxy, upstream) -> None:
    conversation: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    sent = []
    for text in ("a", "b", "c"):
        if len(conversation) > 1:
            conversation.append({"role": "assistant", "content": f"re {text}"})
        conversation.append({"role": "user", "content": text})
        body = {"model": "m", "messages": conversation, "prompt_cache_key": "k"}
        sent.append(json.loads(post(cache_proxy, upstream, "/v1/chat/completions", body))["messages"])
    for before, after in itertools.pairwise(sent):
        assert after[: len(before) - 1] == before[:-1]  # all but the per-turn block is a prefix
    for messages in sent:
        assert messages[-1]["role"] == "system" and "recalled for turn" in messages[-1]["content"]
        assert "Python developer (v0)" in messages[1]["content"]


def test_codex_responses_get_blocks_in_their_slot_and_per_turn_after_the_input(agent_proxy, upstream) -> None:
    golden = json.loads((GOLDEN / "openai_responses_codex.json").read_bytes())
    sent = [
        json.loads(post(agent_proxy, upstream, "/v1/responses", {**golden, "stream": False}))
        for _ in range(2)
    ]
    assert sent[0]["instructions"] == sent[1]["instructions"] != golden["instructions"]
    head, section = sent[0]["instructions"].split("## AGENTS.md spec\n", 1)
    assert head == golden["instructions"].split("## AGENTS.md spec\n", 1)[0]
    assert "Python developer (v0)" in section  # Codex keeps memory rules in its AGENTS.md section
    for body in sent:
        assert body["input"][:-1] == golden["input"]  # the prefix the cache key names
        assert body["input"][-1]["role"] == "system" and "recalled for turn" in body["input"][-1]["content"]
        assert ordered(strip("openai.responses", body, golden)) == ordered({**golden, "stream": False})


# -- agent profiles through the proxy --------------------------------------------------------


@pytest.mark.skipif(not HAS_ANTHROPIC, reason="memtap-anthropic is not installed")
def test_an_unresolved_slot_falls_back_and_is_traced(agent_proxy, upstream, memtap_spans) -> None:
    body = {
        "model": "c",
        "max_tokens": 10,
        "system": "You are Claude Code, Anthropic's official CLI for Claude.\n\n# Tone\nBe brief.",
        "messages": [{"role": "user", "content": "hi"}],
    }
    sent = json.loads(post(agent_proxy, upstream, "/claude-code/v1/messages", body))
    assert sent["system"].startswith(body["system"] + "\n\n" + OPEN_TAG)  # no "# Memory": the end
    events = [
        e for s in memtap_spans.get_finished_spans() for e in s.events if e.name == "memtap.anchor.fallback"
    ]
    assert [(e.attributes["memtap.agent"], e.attributes["memtap.slot"]) for e in events] == [
        ("claude-code", "memory")
    ]
    (inject,) = [s for s in memtap_spans.get_finished_spans() if s.name == "memtap.inject"]
    assert inject.attributes["memtap.agent"] == "claude-code"
