"""In-process placement with the real anthropic SDK: an agent profile from a plugin
(``memtap_agent_profiles``, the hook the proxy uses), chosen by fingerprint or by
``Memory(agent=...)``; session blocks kept byte-identical across turns and dropped by
``forget``."""

from __future__ import annotations

import itertools

import anthropic
import pytest

import memtap
import memtap_anthropic
from memtap import hookimpl
from memtap.formats.blocks import OPEN_TAG
from memtap.protocol.anchors import Segment
from memtap.protocol.wire import SystemBlock

API_KEY = "sk-ant-test-0123456789abcdefghijklmnop"
PROMPT = "You are Acme Agent.\n# Memory\nNotes live here.\n# Rules\nBe kind.\n"


class AcmeProfile:
    """Markdown-ish sections: ``# Memory`` holds the memory slot."""

    name = "acme"

    def detect(self, system_text: str) -> bool:
        return system_text.startswith("You are Acme Agent")

    def split(self, system_text: str) -> list[Segment]:
        segments: list[Segment] = []
        for line in system_text.splitlines(keepends=True):
            if line.startswith("# ") or not segments:
                key = line[2:].strip() if line.startswith("# ") else None
                segments.append(Segment(line, key))
            else:
                segments[-1] = Segment(segments[-1].text + line, segments[-1].key)
        return segments

    def resolve(self, slot: str) -> str | None:
        return "Memory" if slot == "memory" else None


class AcmePlugin:
    @hookimpl
    def memtap_agent_profiles(self):
        return [AcmeProfile()]


class Injector:
    """A session block whose source changes every turn, and a per-turn block."""

    def __init__(self) -> None:
        self.turn = itertools.count()
        self.seen: list[frozenset[str]] = []

    @hookimpl
    def memtap_request_injections(self, request):
        self.seen.append(request.cached_sources)
        n = next(self.turn)
        return [
            SystemBlock(text=f"Alice prefers tea (v{n})", cache="session_init", source="profile"),
            SystemBlock(text=f"recalled {n}", source="recall"),
        ]


def make(server, store, **kwargs):
    injector = Injector()
    memory = memtap.Memory(
        store, plugins=[memtap_anthropic, AcmePlugin(), injector], entry_points=False, **kwargs
    )
    client = memory.register(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)
    )
    return memory, client, injector


def create(client, system, text="hi"):
    return client.messages.create(
        model="claude-x", max_tokens=50, system=system, messages=[{"role": "user", "content": text}]
    )


def test_a_recognised_agent_gets_blocks_in_its_memory_section(server, store):
    memory, client, _ = make(server, store)
    create(client, PROMPT)
    system = server.last_json()["system"]
    head, rest = system.split("Notes live here.\n", 1)
    assert head == "You are Acme Agent.\n# Memory\n"
    assert rest.startswith(OPEN_TAG) and rest.endswith("</memtap-memory>\n# Rules\nBe kind.\n")
    assert rest.index("Alice prefers tea") < rest.index("recalled 0")
    memory.close()


def test_an_unrecognised_prompt_keeps_the_default_placement(server, store):
    memory, client, _ = make(server, store)
    create(client, "Be brief.")
    system = server.last_json()["system"]
    assert system.startswith("Be brief.\n\n" + OPEN_TAG) and system.count(OPEN_TAG) == 2
    memory.close()


@pytest.mark.parametrize("agent", ["acme", None])
def test_memory_agent_option_names_the_profile(server, store, agent):
    memory, client, _ = make(server, store, agent=agent)
    create(client, "Intro.\n# Memory\nNotes.\n")  # no fingerprint: only the option finds it
    system = server.last_json()["system"]
    if agent:
        assert system.startswith("Intro.\n# Memory\nNotes.\n" + OPEN_TAG)
    else:
        assert system.startswith("Intro.\n# Memory\nNotes.\n\n\n" + OPEN_TAG)  # after a blank line
    memory.close()


def test_session_blocks_are_byte_identical_across_turns_and_forgotten_with_the_entity(server, store):
    memory, client, injector = make(server, store)
    cached = [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}]
    with memory.scope(entity_id="alice", session_id="s"):
        create(client, cached, "one")
        first = server.last_json()
        create(client, cached, "two")
        second = server.last_json()
    assert first["system"] == second["system"] and "(v0)" in second["system"][0]["text"]
    assert "recalled" not in second["system"][0]["text"]  # cached prompt: per turn goes late
    assert second["messages"][-1]["content"].startswith("two\n\n" + OPEN_TAG)
    assert "recalled 1" in second["messages"][-1]["content"]
    assert injector.seen == [frozenset(), frozenset({"profile"})]
    memory.forget(entity_id="alice")
    with memory.scope(entity_id="alice", session_id="s"):
        create(client, cached, "three")
    assert "(v2)" in server.last_json()["system"][0]["text"]  # recomputed after forget
    memory.close()
