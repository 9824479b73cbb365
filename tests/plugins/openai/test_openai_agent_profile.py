"""An agent profile's scaffolding with the real openai SDK in-process: never the recall
query nor stored, also when a call is replayed from the spool after a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
from openai_support import API_KEY

import memtap
import memtap_openai
from memtap import hookimpl
from memtap.capture.spool import Spool, encode_record
from memtap.formats.scaffolding import TaggedScaffolding
from memtap.protocol.anchors import Segment
from memtap.protocol.model import Attribution
from memtap.storage.store import InMemoryStore

ENVIRONMENT = "<environment_context>\n  <cwd>/p</cwd>\n</environment_context>"


class AcmeProfile(TaggedScaffolding):
    """A third-party profile that knows its agent's scaffolding (``user_text``, inherited)."""

    name = "acme"

    def __init__(self) -> None:
        super().__init__(tags=["environment_context"])

    def detect(self, system_text: str) -> bool:
        return "Acme" in system_text

    def split(self, system_text: str) -> list[Segment]:
        return [Segment(system_text)]

    def resolve(self, slot: str) -> str | None:
        return None


class Acme:
    def __init__(self) -> None:
        self.queries: list[str] = []

    @hookimpl
    def memtap_agent_profiles(self) -> list[Any]:
        return [AcmeProfile()]

    @hookimpl
    def memtap_request_injections(self, request: Any) -> list[Any]:
        self.queries.append(request.request.messages[-1].content)
        return []


def test_scaffolding_is_not_the_query_and_not_stored(server, store) -> None:
    acme = Acme()
    memory = memtap.Memory(store, plugins=[memtap_openai, acme], entry_points=False, agent="acme")
    client = memory.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    content = [{"type": "text", "text": ENVIRONMENT}, {"type": "text", "text": "I live in Lisbon."}]
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
    assert acme.queries == ["I live in Lisbon."]
    memory.flush()
    (exchange,) = memory.store.exchanges()
    assert [m.content for m in exchange.input] == ["I live in Lisbon."]
    memory.close()


def test_a_call_replayed_from_the_spool_keeps_its_agents_view(tmp_path: Path) -> None:
    """A process died after journaling an agent's call: the next one stores it without the
    agent's scaffolding (the spool record names the profile)."""
    spool = Spool(tmp_path / "spool")
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"{ENVIRONMENT}\nI live in Lisbon."}],
    }
    spool.append(
        encode_record(
            call_id="c1",
            protocol="openai.chat",
            attribution=Attribution(entity_id="e", session_id="s"),
            started_at="2025-01-01T00:00:00+00:00",
            ended_at="2025-01-01T00:00:01+00:00",
            already_present=0,
            stream=False,
            error=None,
            partial=False,
            body=body,
            response='{"choices":[{"index":0,"message":{"role":"assistant","content":"Noted."}}]}',
            events=None,
            agent="acme",
        )
    )
    spool.close()  # unstored: left for the next process
    memory = memtap.Memory(
        InMemoryStore(), plugins=[memtap_openai, Acme()], entry_points=False, spool=tmp_path / "spool"
    )
    assert memory.flush(10)
    (exchange,) = memory.store.exchanges()
    assert [(m.role, m.content) for m in exchange.messages] == [
        ("user", "I live in Lisbon."),
        ("assistant", "Noted."),
    ]
    memory.close()
