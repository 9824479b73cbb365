from __future__ import annotations

import os

# litellm fetches its model cost map from the network at import unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from collections.abc import Iterator

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

import memtap_litellm


class MessageSpy(CustomLogger):
    """litellm's own callback: the messages litellm was asked to send (mock calls too)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[dict]] = []

    def log_pre_api_call(self, model, messages, kwargs):
        self.seen.append([dict(m) for m in messages])


@pytest.fixture
def spy() -> Iterator[MessageSpy]:
    spy = MessageSpy()
    saved = list(litellm.callbacks)
    litellm.callbacks = [spy]
    yield spy
    litellm.callbacks = saved


@pytest.fixture
def memtap_plugins() -> list[object]:
    """``mem`` (memtap's pytest plugin) registers memtap_litellm."""
    return [memtap_litellm]
