from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from proxy_support import provider_plugins

import memtap
from memtap.testing.server import ScriptedModelServer
from memtap_proxy import Proxy, ProxyConfig, ProxyThread


@pytest.fixture(scope="session")
def upstream() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _clean_upstream(upstream: ScriptedModelServer) -> None:
    upstream.clear()


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers the provider plugins, as make_memory does."""
    return provider_plugins()


@pytest.fixture
def proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    # One running session for every request (`--session default`): the SDK clients in
    # these tests send one message per call and expect the earlier ones as history.
    config = ProxyConfig(
        openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url, session_id="default"
    )
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


@pytest.fixture
def http(proxy: ProxyThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy.url, timeout=10) as client:
        yield client
