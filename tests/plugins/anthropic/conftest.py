from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

import memtap
import memtap_anthropic
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer

API_KEY = "sk-ant-test-0123456789abcdefghijklmnop"


@pytest.fixture
def server(memtap_server: ScriptedModelServer) -> ScriptedModelServer:
    return memtap_server


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def mem(store: InMemoryStore) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(store, plugins=[memtap_anthropic], entry_points=False)
    yield memory
    memory.close()


@pytest.fixture
def bare(server: ScriptedModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)


@pytest.fixture
def client(server: ScriptedModelServer, mem: memtap.Memory) -> anthropic.Anthropic:
    return mem.register(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)
    )


@pytest.fixture
def aclient(server: ScriptedModelServer, mem: memtap.Memory) -> anthropic.AsyncAnthropic:
    return mem.register(
        anthropic.AsyncAnthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)
    )
