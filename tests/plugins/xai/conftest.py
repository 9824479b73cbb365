from __future__ import annotations

from collections.abc import Iterator

import pytest
from xai_server import XaiServer

import memtap_xai


@pytest.fixture(scope="session")
def _xai_server() -> Iterator[XaiServer]:
    with XaiServer() as server:
        yield server


@pytest.fixture
def xai_server(_xai_server: XaiServer) -> XaiServer:
    _xai_server.clear()
    return _xai_server


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers memtap_xai."""
    return [memtap_xai]
