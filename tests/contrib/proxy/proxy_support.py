"""Helpers shared by the proxy tests."""

from __future__ import annotations

import importlib.util

import pytest

import memtap
import memtap_openai
from memtap.storage.store import InMemoryStore
from memtap.testing.timing import wait_for

HAS_ANTHROPIC = (
    importlib.util.find_spec("memtap_anthropic") is not None
    and importlib.util.find_spec("anthropic") is not None
)
needs_anthropic = pytest.mark.skipif(not HAS_ANTHROPIC, reason="memtap-anthropic is not installed")
API_KEY = "sk-test-0123456789abcdefghijklmnop"


def provider_plugins() -> list[object]:
    plugins: list[object] = [memtap_openai]
    if HAS_ANTHROPIC:
        import memtap_anthropic

        plugins.append(memtap_anthropic)
    return plugins


def make_memory(store: object | None = None, **kwargs: object) -> memtap.Memory:
    return memtap.Memory(
        store or InMemoryStore(),  # type: ignore[arg-type]
        plugins=[*provider_plugins(), *kwargs.pop("plugins", [])],  # type: ignore[misc]
        entry_points=False,
        **kwargs,  # type: ignore[arg-type]
    )


def settle(mem: memtap.Memory, calls: int) -> None:
    """Wait until ``calls`` model calls are stored (a streamed call is captured once its
    last byte is sent: the client may have read it, and gone on, before)."""
    wait_for(
        lambda: sum(s.exchange_count for s in mem.sessions(entity_id=None)) >= calls,
        10,
        what=f"{calls} calls stored",
    )
    mem.flush()
