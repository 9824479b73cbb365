"""Lossless editing: the upstream gets the client's body plus the injected blocks, nothing
else changed; with nothing to inject, the client's very bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lossless_support import MARK, injections, ordered, plan, strip
from proxy_support import HAS_ANTHROPIC, make_memory, provider_plugins

import memtap_agents
from memtap import HistoryBudget, hookimpl
from memtap.protocol.anchors import INJECTION_POINTS, RELATIONS, SLOTS
from memtap.protocol.wire import CACHE_STRATEGIES, InjectionPlan, SystemBlock
from memtap.testing.server import ScriptedModelServer
from memtap_proxy import Proxy, ProxyConfig, ProxyThread
from memtap_proxy.app import dump_body, edited_body
from memtap_proxy.splice import splice

GOLDEN = Path(__file__).parent / "golden"
PROTOCOLS = {p.name: p for group in (m.memtap_wire_protocols() for m in provider_plugins()) for p in group}

# -- generated bodies -----------------------------------------------------------------------

text = st.text(max_size=20).filter(lambda s: MARK not in s and "<memtap-memory>" not in s)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
extra = st.dictionaries(st.text(min_size=1, max_size=8).map(lambda k: "x_" + k), json_values, max_size=3)


def with_extra(base: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda b, e: {**b, **e}, base, extra)


chat_part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": "https://x/" + u, "detail": "low"}}, text),
    with_extra(st.just({"type": "future_part"})),
)
chat_content = st.one_of(text, st.lists(chat_part, max_size=3))
chat_message = st.one_of(
    with_extra(
        st.builds(
            lambda r, c: {"role": r, "content": c}, st.sampled_from(["system", "developer"]), chat_content
        )
    ),
    with_extra(st.builds(lambda c: {"role": "user", "content": c}, chat_content)),
    with_extra(
        st.builds(
            lambda c, i: {
                "role": "assistant",
                "content": c,
                "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            st.none() | text,
            text,
        )
    ),
    with_extra(st.builds(lambda i, c: {"role": "tool", "tool_call_id": i, "content": c}, text, chat_content)),
)
chat_body = with_extra(
    st.builds(
        lambda m, msgs, s: {"model": m, "messages": msgs, **({"stream": s} if s is not None else {})},
        text,
        st.lists(chat_message, min_size=1, max_size=6),
        st.none() | st.booleans(),
    )
)

item = st.one_of(
    with_extra(
        st.builds(
            lambda r, c: {"type": "message", "role": r, "content": c},
            st.sampled_from(["user", "assistant", "system", "developer"]),
            st.one_of(
                text, st.lists(st.builds(lambda t: {"type": "input_text", "text": t}, text), max_size=2)
            ),
        )
    ),
    with_extra(
        st.builds(lambda s: {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": s}, text)
    ),
    with_extra(
        st.builds(lambda a: {"type": "function_call", "call_id": "c1", "name": "f", "arguments": a}, text)
    ),
    with_extra(st.builds(lambda o: {"type": "function_call_output", "call_id": "c1", "output": o}, text)),
    with_extra(st.just({"type": "future_item"})),
)
responses_body = with_extra(
    st.builds(
        lambda m, i, ins: {"model": m, "input": i, **({"instructions": ins} if ins else {})},
        text,
        st.one_of(text, st.lists(item, max_size=5)),
        st.none() | text,
    )
)

block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda t: {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}, text),
    st.builds(
        lambda d: {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": d}}, text
    ),
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "sig"}, text),
    with_extra(st.just({"type": "future_block"})),
)
user_turn = st.builds(
    lambda c: {"role": "user", "content": c}, st.one_of(text, st.lists(block, min_size=1, max_size=3))
)
assistant_turn = st.builds(
    lambda c: {"role": "assistant", "content": c}, st.lists(block, min_size=1, max_size=3)
)
anthropic_body = with_extra(
    st.builds(
        lambda m, turns, system: {
            "model": m,
            "max_tokens": 1024,
            **({"system": system} if system is not None else {}),
            "messages": [t for pair in turns for t in pair],
        },
        text,
        st.lists(st.tuples(user_turn, assistant_turn), min_size=1, max_size=3).map(
            lambda pairs: [*pairs[:-1], (pairs[-1][0],)]
        ),
        st.none()
        | text.filter(bool)
        | st.lists(
            st.builds(lambda t: {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}, text),
            max_size=3,
        ),
    )
)

BODIES = {"openai.chat": chat_body, "openai.responses": responses_body, "anthropic.messages": anthropic_body}
shapes = st.tuples(st.integers(0, 4), st.booleans(), st.booleans())


@pytest.mark.parametrize("name", sorted(BODIES))
def test_removing_the_injection_gives_back_the_client_body(name: str) -> None:
    if name not in PROTOCOLS:
        pytest.skip(f"{name} is not installed")
    protocol = PROTOCOLS[name]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=BODIES[name], shape=shapes)
    def check(body: dict[str, Any], shape: tuple[int, bool, bool]) -> None:
        raw = json.dumps(body).encode()
        client = json.loads(raw)
        sent = json.loads(dump_body(protocol.inject(client, plan(*shape))))
        assert ordered(client) == ordered(json.loads(raw)), "inject must not mutate its input"
        assert ordered(strip(name, sent, client)) == ordered(client)

    check()


STYLES = {
    "compact": lambda body: json.dumps(body, separators=(",", ":"), ensure_ascii=False),
    "spaced-ascii": lambda body: json.dumps(body),
    "indented": lambda body: json.dumps(body, indent=2),
}


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_spliced_body_is_exactly_the_injected_body(name: str, style: str) -> None:
    """The proxy writes only memtap's changes into the client's text: the result parses to
    exactly the injected body (keys in order, JSON types), whatever the client's spacing
    and escapes; for a compact client it is byte for byte what serialising it whole gives."""
    if name not in PROTOCOLS:
        pytest.skip(f"{name} is not installed")
    protocol = PROTOCOLS[name]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=BODIES[name], shape=shapes, profile=st.booleans())
    def check(body: dict[str, Any], shape: tuple[int, bool, bool], profile: bool) -> None:
        text = STYLES[style](body)
        client = json.loads(text)
        injected = plan(*shape)
        if profile:
            injected = attrs.evolve(injected, profile=memtap_agents.CLAUDE_CODE)
        sent = protocol.inject(client, injected)
        spliced = edited_body(text.encode(), client, sent)
        assert ordered(json.loads(spliced)) == ordered(sent)
        if style == "compact":
            assert spliced == dump_body(sent)

    check()


def test_a_splice_keeps_the_clients_own_spelling_of_what_it_does_not_change() -> None:
    text = '{"model" : "m", "n": 1.50, "e": "caf\u00e9", "messages": [ {"role":"user","content":"hi"} ]}'
    client = json.loads(text)
    sent = {
        **client,
        "messages": [{"role": "system", "content": "<memtap-memory>x</memtap-memory>"}, *client["messages"]],
    }
    out = edited_body(text.encode(), client, sent).decode()
    assert out.startswith('{"model" : "m", "n": 1.50, "e": "caf\u00e9", "messages": [ ')
    assert ordered(json.loads(out)) == ordered(sent)


def test_non_ascii_keys_and_text_are_spliced_as_bytes() -> None:
    raw = '{"café":"naïve 🤖","messages":[{"role":"user","content":"é"}]}'.encode()
    client = json.loads(raw)
    sent = {**client, "messages": [*client["messages"], {"role": "system", "content": "ü"}]}
    out = splice(raw, client, sent)
    assert out is not None and out == dump_body(sent)


SPELLED = r"caf\u00e9 \/ tab\there\n# Memory\n"  # the client's escapes, not json.dumps's


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (SPELLED, "end"),  # inserted in the middle: the shorter side, after it, finds the place
        ("start ", SPELLED),  # ... or the one before it
        (SPELLED, ""),  # appended
        ("", SPELLED),  # prepended
    ],
)
def test_a_block_inserted_into_a_string_leaves_the_rest_as_the_client_spelled_it(
    before: str, after: str
) -> None:
    """An agent's long system prompt with a memory block anchored inside: only the block
    is written (the prompt is not encoded again), the client's escapes kept around it."""
    block = '<memtap-memory>\nx "quoted" ü\n</memtap-memory>\n'
    text = (
        '{"messages":[{"role":"system","content":"' + before + after + '"},{"role":"user","content":"hi"}]}'
    )
    client = json.loads(text)
    system, user = client["messages"]
    cut = len(json.loads(f'"{before}"'))
    content = system["content"][:cut] + block + system["content"][cut:]
    sent = {**client, "messages": [{**system, "content": content}, user]}
    out = edited_body(text.encode(), client, sent).decode()
    assert ordered(json.loads(out)) == ordered(sent)
    encoded = json.dumps(block, ensure_ascii=False)[1:-1]
    assert out == text.replace(before + after, before + encoded + after, 1)


#: Pieces of a client's JSON string: plain text, escapes of every kind (some spelled as
#: json.dumps never would), and what an insertion's placing could mistake for them.
spelled = st.lists(
    st.sampled_from(
        [
            "a",
            "n",
            "u",
            "00e9",
            "003",
            "9",
            "\\u0039",  # "9": "u003" before it and its tail reads as "u0039", "0039"...
            "\\\\",
            "\\n",
            "\\u00e9",
            "\\u0041",
            "\\/",
            '\\"',
            "é",
            "🤖",
            "\\ud83e\\udd16",
        ]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(raw=spelled, at=st.integers(0, 40), block=st.sampled_from(["x", "n", "\\", "9", "<m>\n"]))
def test_any_insertion_into_any_spelling_parses_to_the_injected_body(raw: str, at: int, block: str) -> None:
    text = '{"messages":[{"role":"system","content":"' + raw + '"}]}'
    client = json.loads(text)
    content = client["messages"][0]["content"]
    cut = min(at, len(content))
    sent = {"messages": [{"role": "system", "content": content[:cut] + block + content[cut:]}]}
    assert json.loads(edited_body(text.encode(), client, sent)) == sent


def test_a_changed_string_that_is_no_insertion_is_written_whole() -> None:
    text = r'{"messages":[{"role":"system","content":"café one"},{"role":"user","content":"hi"}]}'
    client = json.loads(text)
    system, user = client["messages"]
    sent = {**client, "messages": [{**system, "content": "café two"}, user]}
    out = edited_body(text.encode(), client, sent)
    assert json.loads(out) == sent
    assert rb'"caf\u00e9' not in out and "café two".encode() in out


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2, "messages": []}',  # duplicate keys: json.loads keeps the last
        '\ufeff{"messages": []}',
    ],
)
def test_what_cannot_be_spliced_exactly_is_serialised_whole(text: str) -> None:
    client = json.loads(text.lstrip("\ufeff"))
    sent = {**client, "messages": [{"role": "user", "content": "x"}]}
    assert edited_body(text.encode(), client, sent) == dump_body(sent)


# -- anchored in an agent's prompt, and after the cached prefix ------------------------------

section = st.sampled_from(["Memory", "Environment", "Harness", "Tone and style", "Session-specific guidance"])
prompt = (
    st.lists(st.one_of(text, section.map(lambda name: f"# {name}\n")), min_size=1, max_size=6)
    .map("".join)
    .filter(bool)
)
anchored_blocks = st.lists(
    st.builds(
        lambda n, slot, relation, point, cache: SystemBlock(
            text=f"fact {n}", slot=slot, relation=relation, point=point, cache=cache
        ),
        st.integers(0, 99),
        st.sampled_from(SLOTS),
        st.sampled_from(RELATIONS),
        st.sampled_from(INJECTION_POINTS),
        st.sampled_from(CACHE_STRATEGIES),
    ),
    min_size=1,
    max_size=5,
)
cached_system = st.lists(
    st.builds(
        lambda t, cached: {
            "type": "text",
            "text": t,
            **({"cache_control": {"type": "ephemeral"}} if cached else {}),
        },
        prompt,
        st.booleans(),
    ),
    min_size=1,
    max_size=3,
)
PROMPTED = {
    "anthropic.messages": st.builds(
        lambda body, system: {**body, "system": system}, anthropic_body, prompt | cached_system
    ),
    "openai.chat": st.builds(
        lambda body, system, key: {
            **body,
            "messages": [{"role": "system", "content": system}, *body["messages"]],
            **({"prompt_cache_key": "k"} if key else {}),
        },
        chat_body,
        prompt | st.lists(st.builds(lambda t: {"type": "text", "text": t}, prompt), max_size=2),
        st.booleans(),
    ),
    "openai.responses": st.builds(
        lambda body, system, key: {
            **body,
            "instructions": system,
            **({"prompt_cache_key": "k"} if key else {}),
        },
        responses_body,
        prompt,
        st.booleans(),
    ),
}


@pytest.mark.parametrize("name", sorted(PROMPTED))
def test_removing_anchored_and_late_blocks_gives_back_the_client_body(name: str) -> None:
    """Blocks placed inside an agent's system text (every slot, relation, point and cache
    strategy), at the end of it, and after the cached prefix all come off cleanly."""
    if name not in PROTOCOLS:
        pytest.skip(f"{name} is not installed")
    protocol = PROTOCOLS[name]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=PROMPTED[name], blocks=anchored_blocks)
    def check(body: dict[str, Any], blocks: list[SystemBlock]) -> None:
        client = json.loads(json.dumps(body))
        plan = InjectionPlan(system_blocks=blocks, profile=memtap_agents.CLAUDE_CODE)
        sent = json.loads(dump_body(protocol.inject(client, plan)))
        assert ordered(client) == ordered(body), "inject must not mutate its input"
        assert ordered(strip(name, sent, client)) == ordered(client)
        dumped = json.dumps(sent)
        assert all(block.text in dumped for block in blocks), "no block is lost"

    check()


# -- through the proxy: golden agent bodies -------------------------------------------------


class FixedInjector:
    """Injects two history messages and one block of each cache strategy."""

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[Any]:
        return injections(2, True, True)


GOLDEN_CASES = [
    ("anthropic_claude_code.json", "/v1/messages", "anthropic.messages"),
    ("openai_chat_agent.json", "/v1/chat/completions", "openai.chat"),
    ("openai_responses_codex.json", "/v1/responses", "openai.responses"),
    # Recorded from the real agents (tests/agents/record_golden.py).
    ("claude_code_first.json", "/v1/messages", "anthropic.messages"),
    ("claude_code_continue.json", "/v1/messages", "anthropic.messages"),
    ("codex_first.json", "/v1/responses", "openai.responses"),
    ("codex_resume.json", "/v1/responses", "openai.responses"),
]


@pytest.fixture(params=[False, True], ids=["no-profiles", "agent-profiles"])
def injecting_proxy(upstream: ScriptedModelServer, request: pytest.FixtureRequest):
    profiles = [memtap_agents] if request.param else []
    memory = make_memory(plugins=[*profiles, FixedInjector()], history=HistoryBudget(max_messages=0))
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, memory)) as thread:
        yield thread
    memory.close()


@pytest.fixture
def quiet_proxy(upstream: ScriptedModelServer):
    memory = make_memory(history=HistoryBudget(max_messages=0))
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, memory)) as thread:
        yield thread
    memory.close()


@pytest.mark.parametrize(("filename", "path", "name"), GOLDEN_CASES)
def test_golden_agent_bodies_survive_injection(injecting_proxy, upstream, filename, path, name) -> None:
    if name not in PROTOCOLS:
        pytest.skip(f"{name} is not installed")
    import httpx

    raw = (GOLDEN / filename).read_bytes()
    client = json.loads(raw)
    # Sent three times: from the second on, the proxy reuses the parsed tail of the body
    # (tools, system...), which injection must not have changed in place.
    for _ in range(3):
        r = httpx.post(injecting_proxy.url + path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        received = upstream.last_json()
        assert ordered(received) != ordered(client)  # something was injected
        if client.get("stream") and name == "openai.chat":
            received.pop("stream_options")
        assert ordered(strip(name, received, client)) == ordered(client)
        dumped = json.dumps(received, ensure_ascii=False)
        assert dumped.count(MARK) == 2 or name == "anthropic.messages"
        assert "stable fact" in dumped and "per-turn fact" in dumped
    bodies = injecting_proxy.proxy.bodies
    for kept in (kept for bucket in bodies._tails.values() for kept in bucket):
        assert ordered(kept.members) == ordered({k: client[k] for k in kept.members})
    if filename.startswith(("claude_code", "codex")):  # long tails after the conversation
        assert bodies.reused >= 2


@pytest.mark.parametrize(("filename", "path", "name"), GOLDEN_CASES)
def test_nothing_to_inject_forwards_the_client_bytes(quiet_proxy, upstream, filename, path, name) -> None:
    import httpx

    raw = (GOLDEN / filename).read_bytes()  # pretty-printed, \\u escapes: bytes must not change
    body = json.loads(raw)
    if body.get("stream") and name == "openai.chat":
        pytest.skip("memtap asks a chat stream for usage")
    httpx.post(quiet_proxy.url + path, content=raw, headers={"content-type": "application/json"})
    assert upstream.requests[-1].body == raw


def test_anthropic_is_covered_when_installed() -> None:
    assert ("anthropic.messages" in PROTOCOLS) == HAS_ANTHROPIC
