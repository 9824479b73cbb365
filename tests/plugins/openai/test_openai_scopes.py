"""A scope opened on one Memory never changes another Memory's calls (issue #13, item 4):
tenant B's client, called inside tenant A's scope, neither carries A's turns nor is stored
as A."""

from __future__ import annotations

import json

import openai
from openai_support import API_KEY

import memtap
import memtap_openai
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer


def _tenant(
    server: ScriptedModelServer, store: InMemoryStore, entity: str
) -> tuple[memtap.Memory, openai.OpenAI]:
    mem = memtap.Memory(store, plugins=[memtap_openai], entry_points=False, entity_id=entity)
    client = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    return mem, mem.register(client)


def _ask(client: openai.OpenAI, text: str) -> None:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])


def test_another_memorys_scope_neither_leaks_history_nor_attribution(server: ScriptedModelServer) -> None:
    store = InMemoryStore()  # one store, two tenants' Memories
    mem_a, client_a = _tenant(server, store, "tenant-a")
    mem_b, client_b = _tenant(server, store, "tenant-b")
    try:
        with mem_a.scope(session_id="private"):
            _ask(client_a, "My salary is 123456, keep it secret")
            assert mem_a.flush()  # tenant A's turn is in the shared store
            _ask(client_b, "What is the weather like?")
        assert "123456" not in json.dumps(server.last_json())
        assert mem_a.flush() and mem_b.flush()
        assert {(s.entity_id, s.session_id) for s in store.sessions()} == {
            ("tenant-a", "private"),
            ("tenant-b", "default"),
        }
        first = mem_b.history("default", entity_id="tenant-b")[0]
        assert first.content == "What is the weather like?"
    finally:
        mem_a.close()
        mem_b.close()
