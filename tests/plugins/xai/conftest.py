from __future__ import annotations

from collections.abc import Iterator

import pytest
import xai_sdk
from xai_server import XaiServer

import memtap
import memtap_xai
from memtap.storage import InMemoryStore

API_KEY = "xai-test0123456789abcdefghijklmnop"


def make_xai(server: XaiServer, *, is_async: bool = False):
    """A real xai-sdk client for the local server (plaintext gRPC: a supported SDK option)."""
    cls = xai_sdk.AsyncClient if is_async else xai_sdk.Client
    return cls(api_key=API_KEY, api_host=server.api_host, use_insecure_channel=True)


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
