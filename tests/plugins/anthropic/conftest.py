from __future__ import annotations

import anthropic
import pytest

import memtap
import memtap_anthropic
from memtap.testing.server import ScriptedModelServer

API_KEY = "sk-ant-test-0123456789abcdefghijklmnop"


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers memtap_anthropic."""
    return [memtap_anthropic]


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
