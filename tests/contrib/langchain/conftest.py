from __future__ import annotations

import pytest
from lc_support import RecordingChatModel

import memtap
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer


@pytest.fixture(scope="module")
def server():
    """The local scripted model server the chat models talk to."""
    with ScriptedModelServer() as srv:
        yield srv


@pytest.fixture
def mem():
    memory = memtap.Memory(InMemoryStore(), entry_points=False)
    yield memory
    memory.close(timeout=1)


@pytest.fixture
def model():
    return RecordingChatModel(calls=[])
