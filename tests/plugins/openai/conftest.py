from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai_support import API_KEY

import memtap
import memtap_openai
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer


@pytest.fixture(scope="session")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_server(server: ScriptedModelServer) -> None:
    server.clear()


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def mem(store: InMemoryStore) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(store, plugins=[memtap_openai], entry_points=False)
    yield memory
    memory.close()


@pytest.fixture
def client(server: ScriptedModelServer, mem: memtap.Memory) -> openai.OpenAI:
    return mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


@pytest.fixture
def aclient(server: ScriptedModelServer, mem: memtap.Memory) -> openai.AsyncOpenAI:
    return mem.register(openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


@pytest.fixture
def bare(server: ScriptedModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
