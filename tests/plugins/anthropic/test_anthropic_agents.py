"""Agent-shaped requests in-process, with the real anthropic SDK: a ``{"role": "system"}``
message inside ``messages`` (Claude Code sends its environment so) is system text, memory
goes after its cache breakpoint, and an agent profile's scaffolding is never read as the
user (the same profile code as in the proxy)."""

from __future__ import annotations

from typing import Any

import anthropic

import memtap
import memtap_anthropic
from memtap import hookimpl
from memtap.formats.blocks import OPEN_TAG
from memtap.formats.scaffolding import TaggedScaffolding
from memtap.protocol.anchors import Segment
from memtap.protocol.wire import SystemBlock

API_KEY = "sk-ant-test-0123456789abcdefghijklmnop"
ENVIRONMENT = {
    "role": "system",
    "content": [{"type": "text", "text": "# Environment\ncwd: /p", "cache_control": {"type": "ephemeral"}}],
}
REMINDER = "<system-reminder>\nAvailable agent types: Explore, Plan\n</system-reminder>"


class AcmeProfile(TaggedScaffolding):
    """A third-party profile that knows its agent's scaffolding (``user_text``, inherited)."""

    name = "acme"

    def __init__(self) -> None:
        super().__init__(tags=["system-reminder"])

    def detect(self, system_text: str) -> bool:
        return "Acme" in system_text

    def split(self, system_text: str) -> list[Segment]:
        return [Segment(system_text)]

    def resolve(self, slot: str) -> str | None:
        return None


class Seen:
    """Profiles and an injector recording what the injectors were shown."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    @hookimpl
    def memtap_agent_profiles(self) -> list[Any]:
        return [AcmeProfile()]

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[SystemBlock]:
        self.requests.append(request)
        return [SystemBlock(text="recalled fact", source="recall")]


def make(server: Any, store: Any, seen: Seen) -> tuple[memtap.Memory, anthropic.Anthropic]:
    memory = memtap.Memory(store, plugins=[memtap_anthropic, seen], entry_points=False)
    client = memory.register(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)
    )
    return memory, client


def test_a_system_message_inside_messages_is_system_text(server, store) -> None:
    seen = Seen()
    memory, client = make(server, store, seen)
    prompt = {"role": "user", "content": [{"type": "text", "text": "hello there"}]}
    client.messages.create(model="m", max_tokens=10, system="Be brief.", messages=[prompt, ENVIRONMENT])
    (request,) = seen.requests
    assert [(m.role, m.content) for m in request.request.messages] == [("user", "hello there")]
    assert request.request.system == "Be brief.\n\n# Environment\ncwd: /p"
    memory.flush()
    (exchange,) = memory.store.exchanges()
    assert [m.role for m in exchange.input] == ["user"]
    memory.close()


def test_per_turn_memory_goes_after_a_trailing_system_messages_breakpoint(server, store) -> None:
    memory, client = make(server, store, Seen())
    prompt = {"role": "user", "content": [{"type": "text", "text": "hello there"}]}
    client.messages.create(model="m", max_tokens=10, system="Be brief.", messages=[prompt, ENVIRONMENT])
    sent = server.last_json()
    assert sent["system"] == "Be brief."  # the cached prefix is untouched
    assert sent["messages"][0] == prompt
    environment = sent["messages"][1]["content"]
    assert environment[0] == ENVIRONMENT["content"][0]  # its breakpoint, then memtap's block
    assert environment[1]["text"].startswith(OPEN_TAG) and "recalled fact" in environment[1]["text"]
    memory.close()


def test_an_agents_scaffolding_is_neither_the_query_nor_stored(server, store) -> None:
    seen = Seen()
    memory, client = make(server, store, seen)
    content = [{"type": "text", "text": REMINDER}, {"type": "text", "text": "My favourite colour is teal."}]
    client.messages.create(
        model="m", max_tokens=10, system="You are Acme.", messages=[{"role": "user", "content": content}]
    )
    (request,) = seen.requests
    assert request.agent == "acme"
    assert [m.content for m in request.request.messages] == ["My favourite colour is teal."]
    assert server.last_json()["messages"][0]["content"][0]["text"] == REMINDER  # kept on the wire
    memory.flush()
    (exchange,) = memory.store.exchanges()
    assert [m.content for m in exchange.input] == ["My favourite colour is teal."]
    assert [f.text for f in memory.facts(entity_id="default")] == ["My favourite colour is teal."]
    memory.close()


def test_a_message_that_is_only_scaffolding_is_left_out(server, store) -> None:
    seen = Seen()
    memory, client = make(server, store, seen)
    messages = [
        {"role": "user", "content": REMINDER},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "hello"},
    ]
    client.messages.create(model="m", max_tokens=10, system="You are Acme.", messages=messages)
    assert [(m.role, m.content) for m in seen.requests[0].request.messages] == [
        ("assistant", "ok"),
        ("user", "hello"),
    ]
    memory.close()
