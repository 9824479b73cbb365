from __future__ import annotations

from collections.abc import Iterator

import pytest
from bedrock_server import BedrockServer

import memtap
import memtap_bedrock
from memtap.storage.store import InMemoryStore


@pytest.fixture(scope="session")
def _bedrock_server() -> Iterator[BedrockServer]:
    with BedrockServer() as server:
        yield server


@pytest.fixture
def bedrock_server(_bedrock_server: BedrockServer) -> BedrockServer:
    _bedrock_server.clear()
    return _bedrock_server


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def mem(store: InMemoryStore) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(store, plugins=[memtap_bedrock], entry_points=False)
    yield memory
    memory.close()
