from __future__ import annotations

from collections.abc import Iterator

import pytest
from xai_server import XaiServer

import memtap
import memtap_xai
from memtap.storage.store import InMemoryStore


@pytest.fixture(scope="session")
def _xai_server() -> Iterator[XaiServer]:
    with XaiServer() as server:
        yield server


@pytest.fixture
def xai_server(_xai_server: XaiServer) -> XaiServer:
    _xai_server.clear()
    return _xai_server


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def mem(store: InMemoryStore) -> Iterator[memtap.Memory]:
    memory = memtap.Memory(store, plugins=[memtap_xai], entry_points=False)
    yield memory
    memory.close()
