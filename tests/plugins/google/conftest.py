from __future__ import annotations

import pytest
from google import genai
from google.genai import types

import memtap
import memtap_google
from memtap.testing.server import ScriptedModelServer

API_KEY = "AIzaSyTest0123456789abcdefghijklmnopqrs"


def make_client(server: ScriptedModelServer) -> genai.Client:
    return genai.Client(api_key=API_KEY, http_options=types.HttpOptions(base_url=server.gemini_base_url))


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers memtap_google."""
    return [memtap_google]


@pytest.fixture
def new_client(server: ScriptedModelServer):
    """Makes unregistered clients for the scripted server."""
    return lambda: make_client(server)


@pytest.fixture
def bare(server: ScriptedModelServer) -> genai.Client:
    return make_client(server)


@pytest.fixture
def client(server: ScriptedModelServer, mem: memtap.Memory) -> genai.Client:
    return mem.register(make_client(server))
