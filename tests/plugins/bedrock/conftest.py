from __future__ import annotations

from collections.abc import Iterator

import pytest
from bedrock_server import BedrockServer

import memtap_bedrock


@pytest.fixture(scope="session")
def _bedrock_server() -> Iterator[BedrockServer]:
    with BedrockServer() as server:
        yield server


@pytest.fixture
def bedrock_server(_bedrock_server: BedrockServer) -> BedrockServer:
    _bedrock_server.clear()
    return _bedrock_server


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers memtap_bedrock."""
    return [memtap_bedrock]
