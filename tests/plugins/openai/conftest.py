from __future__ import annotations

import openai
import pytest
from openai_support import API_KEY

import memtap
import memtap_openai
from memtap.testing.server import ScriptedModelServer


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers memtap_openai."""
    return [memtap_openai]


@pytest.fixture
def client(server: ScriptedModelServer, mem: memtap.Memory) -> openai.OpenAI:
    return mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


@pytest.fixture
def aclient(server: ScriptedModelServer, mem: memtap.Memory) -> openai.AsyncOpenAI:
    return mem.register(openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


@pytest.fixture
def bare(server: ScriptedModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
