"""The real agents' requests through the proxy: attribution from their own traffic, their
scaffolding kept on the wire but never read as the user, memory placed after their own
system and developer items without moving their cached prefix, ``mem:`` commands, probes.

The bodies are recorded from Claude Code 2.1.332 and Codex CLI 0.171
(``tests/agents/record_golden.py``); the agents themselves run in ``tests/agents``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lossless_support import ordered, strip
from proxy_raw_upstream import RawUpstream, json_answer
from proxy_support import needs_anthropic, provider_plugins, settle

import memtap
import memtap_agents
from memtap import hookimpl
from memtap.protocol.wire import SystemBlock
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

GOLDEN = Path(__file__).parent / "golden"
MEMORY_TAG = "<memtap-memory>"


def golden(name: str) -> tuple[dict[str, str], bytes]:
    """A recorded request: the headers worth sending again, and the body's bytes."""
    headers = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    return headers, (GOLDEN / f"{name}.json").read_bytes()


def with_prompt(raw: bytes, old: str, new: str) -> bytes:
    """A recorded body with the user's prompt replaced (the bytes around it kept)."""
    assert raw.count(old.encode()) >= 1
    return raw.replace(json.dumps(old)[1:-1].encode(), json.dumps(new)[1:-1].encode())


class Recall:
    """A per-turn block that changes every turn (like recalled facts) and a session block
    whose source changes every turn (memtap keeps the first)."""

    def __init__(self) -> None:
        self.turn = itertools.count(1)

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[SystemBlock]:
        n = next(self.turn)
        return [
            SystemBlock(text=f"The user's profile, version {n}.", cache="session_init", source="profile"),
            SystemBlock(text=f"recalled for turn {n}", cache="per_turn", source="recall"),
        ]


@pytest.fixture
def memtap_plugins() -> list[object]:
    return [*provider_plugins(), memtap_agents, Recall()]


@pytest.fixture
def agents_proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    """The proxy as `memtap proxy` runs by default: no --session."""
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


def send(proxy: ProxyThread, path: str, headers: dict[str, str], body: bytes, **extra: str) -> httpx.Response:
    r = httpx.post(proxy.url + path, content=body, headers={**headers, **extra}, timeout=10)
    assert r.status_code == 200, r.text
    return r


def memory_texts(value: Any) -> list[str]:
    """Every memtap element in a JSON value, in order."""
    text = json.dumps(value, ensure_ascii=False)
    return [part.split("</memtap-memory>")[0] for part in text.split(MEMORY_TAG)[1:]]


def cache_pieces(body: dict[str, Any]) -> list[str]:
    """An Anthropic request's blocks in the order its prompt cache reads them (tools, system,
    messages), each as JSON text."""
    system = body.get("system") or []
    pieces = [json.dumps(t, ensure_ascii=False) for t in body.get("tools") or []]
    pieces += [json.dumps(b, ensure_ascii=False) for b in (system if isinstance(system, list) else [system])]
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else [content]:
            pieces.append(json.dumps([message["role"], block], ensure_ascii=False))
    return pieces


def before_last_breakpoint(body: dict[str, Any]) -> list[str]:
    pieces = cache_pieces(body)
    last = max(i for i, p in enumerate(pieces) if '"cache_control"' in p)
    return pieces[: last + 1]


# -- attribution ---------------------------------------------------------------------------


@needs_anthropic
def test_claude_code_turns_are_its_session_and_never_injected_again(agents_proxy, upstream, mem) -> None:
    headers, first = golden("claude_code_first")
    _, later = golden("claude_code_continue")
    continued = json.loads(later)
    # The first turn as Claude Code makes it: a tool use, then its result sent back.
    read = ToolCallSpec(
        "Read", json.dumps({"file_path": "/home/dev/project/notes.txt"}), id="toolu_01ReadNotes"
    )
    upstream.script(
        Reply(thinking="I should read the file first.", tool_calls=[read]),
        Reply(text="It says the deploy key rotates on Fridays.", thinking="The file answers it."),
    )
    send(agents_proxy, "/v1/messages", headers, first)
    result = json.dumps({**continued, "messages": continued["messages"][:4]}).encode()
    send(agents_proxy, "/v1/messages", headers, result)
    send(agents_proxy, "/v1/messages", headers, later)
    sent = strip("anthropic.messages", upstream.last_json(), continued)  # memory blocks out
    assert sent["messages"] == continued["messages"]  # and no turn injected again
    session = headers["x-claude-code-session-id"]
    settle(mem, 3)
    stored = [(m.role, m.content) for m in mem.history(session)]
    assert [text for role, text in stored if role == "user"] == [
        "Read notes.txt and tell me what it says.",
        "What did I ask you first?",
    ]
    assert [role for role, _ in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert {s.session_id for s in mem.sessions()} == {session}


@needs_anthropic
def test_a_new_claude_code_session_reuses_the_parsed_tools_of_earlier_ones(
    agents_proxy, upstream, mem
) -> None:
    # Claude Code names its session in the header and in ``metadata``, after its 32 KB of
    # tools: a new session's first request must not parse them again (issue 37: +0.6 ms).
    headers, first = golden("claude_code_first")
    old = headers["x-claude-code-session-id"]
    sessions = [old[:-4] + f"{n:04d}" for n in range(1, 4)]
    for session in sessions:
        body = first.replace(old.encode(), session.encode())
        send(agents_proxy, "/v1/messages", {**headers, "x-claude-code-session-id": session}, body)
        sent = strip("anthropic.messages", upstream.last_json(), json.loads(body))
        assert sent == json.loads(body)  # memory blocks out: the client's request, as parsed
    bodies = agents_proxy.proxy.bodies
    assert (bodies.whole, bodies.reused) == (1, 2)
    settle(mem, 3)
    assert {s.session_id for s in mem.sessions()} == set(sessions)


@needs_anthropic
def test_a_session_the_user_names_gets_history_with_the_same_bytes_every_turn(
    agents_proxy, upstream, mem
) -> None:
    named = {"x-memtap-session": "project-x"}
    httpx.post(
        agents_proxy.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "We deploy on Fridays."}]},
        headers=named,
    ).raise_for_status()
    headers, first = golden("claude_code_first")
    send(agents_proxy, "/v1/messages", headers, first, **named)
    sent1 = upstream.last_json()
    headers, later = golden("claude_code_continue")
    send(agents_proxy, "/v1/messages", headers, later, **named)
    sent2 = upstream.last_json()
    history = [
        {"role": "user", "content": "We deploy on Fridays."},
        {"role": "assistant", "content": "You said: We deploy on Fridays."},
    ]
    assert sent1["messages"][:2] == sent2["messages"][:2] == history
    assert json.dumps(sent1["system"]) == json.dumps(sent2["system"])  # the cached system prefix


def test_clients_without_any_session_are_kept_apart_and_resends_are_recognised(
    agents_proxy, upstream, mem
) -> None:
    def chat(*messages: str) -> dict[str, Any]:
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": m} for i, m in enumerate(messages)
        ]
        httpx.post(
            agents_proxy.url + "/v1/chat/completions", json={"model": "m", "messages": turns}
        ).raise_for_status()
        return upstream.last_json()

    chat("I am Alice and I like tea.")
    sent = chat("I am Bob.")  # a new conversation: none of Alice's turns
    assert [m["content"] for m in sent["messages"] if m["role"] != "system"] == ["I am Bob."]
    sent = chat("I am Alice and I like tea.", "You said: I am Alice and I like tea.", "And coffee?")
    assert [m["content"] for m in sent["messages"] if m["role"] != "system"] == [
        "I am Alice and I like tea.",
        "You said: I am Alice and I like tea.",
        "And coffee?",
    ]
    settle(mem, 3)
    sessions = mem.sessions()
    assert len(sessions) == 2 and all(s.session_id.startswith("conv-") for s in sessions)
    alice = next(s for s in sessions if s.exchange_count == 2)
    assert [m.content for m in mem.history(alice.session_id)] == [
        "I am Alice and I like tea.",
        "You said: I am Alice and I like tea.",
        "And coffee?",
        "You said: And coffee?",
    ]


def test_a_configured_session_keeps_one_running_conversation(upstream, mem) -> None:
    config = ProxyConfig(openai_upstream=upstream.base_url, session_id="desk")
    with ProxyThread(Proxy(config, mem)) as proxy:
        for text in ("first", "second"):
            body = {"model": "m", "messages": [{"role": "user", "content": text}]}
            httpx.post(proxy.url + "/v1/chat/completions", json=body).raise_for_status()
    assert [m["content"] for m in upstream.last_json()["messages"] if m["role"] != "system"] == [
        "first",
        "You said: first",
        "second",
    ]


def test_headers_win_over_what_the_agent_says(agents_proxy, upstream, mem) -> None:
    headers, body = golden("codex_first")
    send(
        agents_proxy, "/v1/responses", headers, body, **{"x-memtap-entity": "alice", "x-memtap-session": "s1"}
    )
    settle(mem, 1)
    assert [(s.entity_id, s.session_id) for s in mem.sessions(entity_id="alice")] == [("alice", "s1")]
    assert mem.sessions(entity_id="default") == []


# -- scaffolding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path", "prompt"),
    [
        pytest.param(
            "claude_code_first",
            "/v1/messages",
            "Read notes.txt and tell me what it says.",
            marks=needs_anthropic,
        ),
        ("codex_first", "/v1/responses", "Read notes.txt and tell me what it says."),
    ],
)
def test_the_prompt_alone_is_stored(agents_proxy, upstream, mem, name, path, prompt) -> None:
    headers, body = golden(name)
    send(agents_proxy, path, headers, body)
    assert upstream.requests[-1].body != body  # memory was injected; the scaffolding stays
    assert upstream.requests[-1].body.count(b"<environment_context>") == body.count(b"<environment_context>")
    assert upstream.requests[-1].body.count(b"<system-reminder>") == body.count(b"<system-reminder>")
    settle(mem, 1)
    (session,) = mem.sessions()
    assert next((m.role, m.content) for m in mem.history(session.session_id)) == ("user", prompt)


@pytest.mark.parametrize(
    ("name", "path", "stream_marker"),
    [
        pytest.param("claude_code_first", "/v1/messages", b"event: message_start", marks=needs_anthropic),
        ("codex_first", "/v1/responses", b"event: response.completed"),
    ],
)
def test_mem_status_in_a_real_prompt_is_answered_by_the_proxy(
    agents_proxy, upstream, name, path, stream_marker
) -> None:
    headers, body = golden(name)
    body = with_prompt(body, "Read notes.txt and tell me what it says.", "mem:status")
    r = send(agents_proxy, path, headers, body)
    assert stream_marker in r.content and b"memtap proxy: store" in r.content
    assert b"named by the agent" in r.content
    assert upstream.requests == []


# -- placement -----------------------------------------------------------------------------


@needs_anthropic
def test_claude_code_memory_goes_after_its_last_cache_breakpoint(agents_proxy, upstream) -> None:
    sent = []
    for name in ("claude_code_first", "claude_code_continue"):
        headers, body = golden(name)
        send(agents_proxy, "/v1/messages", headers, body)
        sent.append((json.loads(body), upstream.last_json()))
    for client, body in sent:
        prefix = before_last_breakpoint(body)
        assert not any("recalled for turn" in p for p in prefix)  # per-turn text after it
        assert any("recalled for turn" in p for p in cache_pieces(body))
        assert ordered(strip("anthropic.messages", body, client)) == ordered(client)  # lossless
    # The session block is the first turn's, byte for byte, and the system the same.
    (first_client, first), (_, second) = sent
    assert json.dumps(first["system"]) == json.dumps(second["system"])
    assert memory_texts(first["system"]) == memory_texts(second["system"])
    assert "version 1" in memory_texts(first["system"])[0]
    # ... at Claude Code's own "# Memory" section, inside its cached system prompt.
    memory_section = first["system"][2]["text"].split("\n# Memory\n", 1)[1].split("\n# ", 1)[0]
    assert MEMORY_TAG in memory_section and first_client["system"][2]["text"] != first["system"][2]["text"]


def test_codex_memory_goes_after_its_developer_items_and_keeps_its_prefix(agents_proxy, upstream) -> None:
    sent = []
    for name in ("codex_first", "codex_resume"):
        headers, body = golden(name)
        send(agents_proxy, "/v1/responses", headers, body)
        sent.append((json.loads(body), upstream.last_json()))
    for client, body in sent:
        assert "instructions" not in body
        assert body["input"][:2] == client["input"][:2]  # Codex's developer items first, as sent
        assert MEMORY_TAG in json.dumps(body["input"][2]) and "version 1" in json.dumps(body["input"][2])
        assert "recalled for turn" in json.dumps(body["input"][-1])  # per-turn: the very end
    # What the first turn sent, but its per-turn tail, is where the second turn starts:
    # Codex's automatic prefix cache (keyed by prompt_cache_key) keeps hitting.
    (_, first), (_, second) = sent
    assert second["input"][: len(first["input"]) - 1] == first["input"][:-1]


# -- probes --------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["HEAD", "GET"])
def test_a_probe_reaches_the_only_upstream_configured(mem, method) -> None:
    with RawUpstream() as raw:
        raw.script = lambda seen: json_answer({"ok": True})
        config = ProxyConfig(anthropic_upstream=raw.url)
        with ProxyThread(Proxy(config, mem)) as proxy:
            r = httpx.request(method, proxy.url + "/")
        assert r.status_code == 200
        assert [(s.method, s.target) for s in raw.requests] == [(method, "/")]


@pytest.mark.parametrize("prefix", ["/claude-code", "/codex"])
def test_an_agent_prefix_names_the_family_of_a_probe(upstream, mem, prefix) -> None:
    with RawUpstream() as anthropic, RawUpstream() as openai:
        anthropic.script = openai.script = lambda seen: json_answer({})
        config = ProxyConfig(anthropic_upstream=anthropic.url, openai_upstream=openai.url)
        with ProxyThread(Proxy(config, mem)) as proxy:
            httpx.head(proxy.url + prefix + "/").raise_for_status()
        hit = anthropic if prefix == "/claude-code" else openai
        assert [s.method for s in hit.requests] == ["HEAD"]


def test_a_probe_without_upstream_is_answered_by_the_proxy(mem) -> None:
    with ProxyThread(Proxy(ProxyConfig(), mem)) as proxy:
        head = httpx.head(proxy.url + "/")
        get = httpx.get(proxy.url + "/")
        api = httpx.get(proxy.url + "/v1/models")
    assert head.status_code == 200 and head.content == b""
    assert get.json() == {"memtap": "proxy", "status": "ok"}
    assert api.status_code == 502 and "--openai-upstream" in api.text  # an API call still says what to set


def test_scripted_replies_reach_real_bodies(agents_proxy, upstream) -> None:
    """The scripted upstream answers the recorded bodies (a sanity check of the goldens)."""
    upstream.script(Reply(text="ok"))
    headers, body = golden("codex_first")
    r = send(agents_proxy, "/v1/responses", headers, body)
    assert b"response.completed" in r.content
