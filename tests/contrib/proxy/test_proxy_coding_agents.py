"""Qwen Code, opencode, aider and agents no profile knows, through the proxy, on their real
requests (recorded from Qwen Code 0.24.4, opencode 1.18.33 and aider 0.86.2 by
``tests/agents/record_golden.py``): each agent's sessions from its own traffic, what its user
typed stored and nothing else, its side calls neither injected into nor stored, its bytes
unchanged when nothing is injected. The agents themselves run in ``tests/agents``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_support import provider_plugins, settle

import memtap
import memtap_agents
from memtap.testing.server import Reply, ScriptedModelServer
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

GOLDEN = Path(__file__).parent / "golden"
MEMORY_TAG = "<memtap-memory>"
TYPED_FIRST = "My favourite colour is teal."
TYPED_LATER = "What is my favourite colour?"

#: Each agent's first request, a later one of the same session (continued, restored), and
#: the answer to the first that the later one resends.
CONVERSATIONS = {
    "qwen-code": ("qwen_code_first", "qwen_code_continue", "Answer 0."),
    "opencode": ("opencode_first", "opencode_continue", "Answer 1."),  # its title call had 0
    "aider": ("aider_first", "aider_restored", "Answer 0."),
}
#: Each agent's side calls, recorded in the same sessions.
SIDE_CALLS = ["qwen_code_memory_extraction", "opencode_title"]
#: What the agents put around their users' words: never stored.
SCAFFOLDING = (
    "<system-reminder",
    "Managed memory",
    "Generate a title",
    "I am not sharing any files",
    "I switched to a new code base",
    "Change the greeting",
    "To suggest changes to a file",
    "Ok.",
    '"My favourite',
)


def golden(name: str) -> tuple[dict[str, str], bytes]:
    """A recorded request: its headers and the body's bytes."""
    headers = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    return headers, (GOLDEN / f"{name}.json").read_bytes()


def with_prompt(raw: bytes, old: str, new: str) -> bytes:
    """A recorded body with the user's words replaced (the bytes around them kept)."""
    assert json.dumps(old)[1:-1].encode() in raw
    return raw.replace(json.dumps(old)[1:-1].encode(), json.dumps(new)[1:-1].encode())


@pytest.fixture
def memtap_plugins() -> list[object]:
    return [*provider_plugins(), memtap_agents]


@pytest.fixture
def agents_proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    """The proxy as `memtap proxy` runs by default: no --session."""
    config = ProxyConfig(openai_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


def send(proxy: ProxyThread, headers: dict[str, str], body: bytes) -> httpx.Response:
    r = httpx.post(proxy.url + "/v1/chat/completions", content=body, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    return r


def stored_texts(mem: memtap.Memory) -> list[str]:
    """Every stored turn and fact, as text."""
    texts = [m.content for s in mem.sessions(entity_id=None) for m in mem.history(s.session_id)]
    return texts + [f.text for f in mem.facts(entity_id="default")]


@pytest.mark.parametrize("agent", sorted(CONVERSATIONS))
def test_a_conversation_is_one_session_holding_what_was_typed(agents_proxy, upstream, mem, agent) -> None:
    first, later, answer = CONVERSATIONS[agent]
    upstream.script(Reply(text=answer), Reply(text="Teal."))
    send(agents_proxy, *golden(first))
    settle(mem, 1)
    send(agents_proxy, *golden(later))
    settle(mem, 2)

    sessions = mem.sessions(entity_id="default")
    assert len(sessions) == 1, [s.session_id for s in sessions]
    history = [(m.role, m.content) for m in mem.history(sessions[0].session_id)]
    assert history == [
        ("user", TYPED_FIRST),
        ("assistant", answer),
        ("user", TYPED_LATER),
        ("assistant", "Teal."),
    ]
    facts = [f.text for f in mem.facts(entity_id="default")]
    assert TYPED_FIRST in facts
    assert answer not in facts and "Teal." not in facts  # a coding agent's answers
    for text in stored_texts(mem):
        assert not any(marker in text for marker in SCAFFOLDING), text


@pytest.mark.parametrize("name", SIDE_CALLS)
def test_side_calls_are_neither_injected_into_nor_stored(agents_proxy, upstream, mem, name) -> None:
    mem.remember("The user's favourite colour is teal.", entity_id="default")
    headers, body = golden(name)
    upstream.script(Reply(text="Teal colour preference"))
    send(agents_proxy, headers, body)
    assert upstream.requests[-1].body == body  # forwarded byte for byte
    mem.flush()
    assert mem.sessions(entity_id=None) == []
    assert [f.text for f in mem.facts(entity_id="default")] == ["The user's favourite colour is teal."]


@pytest.mark.parametrize(
    "name", ["aider_first", "aider_restored", "aider_gpt4o_first", "opencode_first", "qwen_code_first"]
)
def test_bytes_are_unchanged_when_nothing_is_injected(agents_proxy, upstream, name) -> None:
    headers, body = golden(name)
    upstream.script(Reply(text="Answer 0.", chunks=1))
    r = send(agents_proxy, headers, body)
    assert upstream.requests[-1].body == body  # aider's stream asks for no usage: none added
    assert b"Answer 0." in r.content


@pytest.mark.parametrize(
    ("name", "typed"),
    [
        ("qwen_code_first", TYPED_FIRST),
        ("opencode_first", '"' + TYPED_FIRST + '"'),  # as `opencode run` quotes it
        ("aider_first", TYPED_FIRST),
        ("aider_restored", TYPED_LATER),
    ],
)
def test_mem_status_in_the_agents_own_form_is_answered_by_the_proxy(
    agents_proxy, upstream, name, typed
) -> None:
    headers, body = golden(name)
    quoted = typed.startswith('"')
    command = '"mem:status"' if quoted else "mem:status"
    r = send(agents_proxy, headers, with_prompt(body, typed, command))
    assert b"memtap proxy: store" in r.content
    assert upstream.requests == []


def test_sessions_of_different_prompts_are_apart(agents_proxy, upstream, mem) -> None:
    for agent in ("qwen-code", "aider"):
        headers, body = golden(CONVERSATIONS[agent][0])
        upstream.script(Reply(text="Noted."), Reply(text="Noted."))
        send(agents_proxy, headers, body)
        send(agents_proxy, headers, with_prompt(body, TYPED_FIRST, "We deploy on Fridays."))
    settle(mem, 4)
    assert len(mem.sessions(entity_id="default")) == 4


# -- agents no profile knows ----------------------------------------------------------------

#: An unknown agent's first requests: tools, a long system prompt, reminders around the
#: prompt, few-shot examples first (as aider sends them).
UNKNOWN_SYSTEM = (
    "You are Ferret, a terminal coding assistant.\n" + "Follow the project's conventions.\n" * 120
)
EXAMPLES = [
    {"role": "user", "content": "Rename foo() to bar()."},
    {"role": "assistant", "content": "Renamed foo() to bar() in utils.py."},
]
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def unknown_agent_body(prompt: str, *, earlier: list[dict[str, Any]] = ()) -> bytes:  # type: ignore[assignment]
    reminder = "<system-reminder>\nThe working directory is /home/dev/project.\n</system-reminder>\n"
    return json.dumps(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": UNKNOWN_SYSTEM},
                *EXAMPLES,
                *earlier,
                {"role": "user", "content": reminder + prompt},
            ],
            "tools": TOOLS,
        }
    ).encode()


def test_an_unknown_agent_is_read_conservatively(agents_proxy, upstream, mem) -> None:
    upstream.script(Reply(text="Our deploys happen every Friday at noon, as you said."), Reply(text="Done."))
    send(agents_proxy, {"content-type": "application/json"}, unknown_agent_body("We deploy on Fridays."))
    send(agents_proxy, {"content-type": "application/json"}, unknown_agent_body("Add a CHANGELOG entry."))
    settle(mem, 2)
    facts = [f.text for f in mem.facts(entity_id="default")]
    assert not any("Friday at noon" in f or "Done." in f for f in facts), facts  # no model answers
    assert not any("system-reminder" in t or "working directory" in t for t in stored_texts(mem))
    users = [
        m.content for s in mem.sessions(entity_id=None) for m in mem.history(s.session_id) if m.role == "user"
    ]
    assert "We deploy on Fridays." in users


def test_unknown_agent_conversations_opening_with_the_same_examples_stay_apart(
    agents_proxy, upstream, mem
) -> None:
    headers = {"content-type": "application/json"}
    upstream.script(*(Reply(text=f"Answer {i}.") for i in range(4)))
    send(agents_proxy, headers, unknown_agent_body("We deploy on Fridays."))
    send(agents_proxy, headers, unknown_agent_body("The staging database is heron."))
    earlier = [
        {"role": "user", "content": "We deploy on Fridays."},
        {"role": "assistant", "content": "Answer 0."},
    ]
    send(agents_proxy, headers, unknown_agent_body("When do we deploy?", earlier=earlier))
    settle(mem, 3)
    histories = sorted(
        [m.content for m in mem.history(s.session_id) if m.role == "user"]
        for s in mem.sessions(entity_id=None)
    )
    assert histories == [
        ["Rename foo() to bar().", "The staging database is heron."],
        ["Rename foo() to bar().", "We deploy on Fridays.", "When do we deploy?"],
    ]
