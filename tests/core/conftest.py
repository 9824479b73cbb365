"""Fixtures shared by the core tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memtap.protocol import json_encoder as encoder_module
from memtap.workers.background import calls_in_flight


@pytest.fixture
def memtap_memory_options() -> dict[str, Any]:
    """Core's ``mem`` recalls by words (no embedder: tests/core needs no plugin) and writes
    no journal (the spool has tests of its own)."""
    return {"spool": False, "embedder": False}


@pytest.fixture(params=["pydantic-core", "standard-library"])
def json_encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs the test with each JSON encoder the spool may write with: pydantic-core's
    (installed with every provider SDK, and a test dependency: never skipped) and the
    standard library's (the proxy alone)."""
    import pydantic_core

    fast = None if request.param == "standard-library" else pydantic_core.to_json
    monkeypatch.setattr(encoder_module, "_fast_to_json", fast)
    yield request.param


@pytest.fixture(autouse=True)
def _no_call_left_in_flight(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that begins an intercepted call must see it end (captured, failed or
    untracked): a call left counted in flight keeps the process from ever looking quiet
    (the embedding worker then never uses the idle cores; one-off loading waits its whole
    timeout). A test that leaves one on purpose says so with ``leaves_call_in_flight``."""
    before = calls_in_flight()
    yield
    if request.node.get_closest_marker("leaves_call_in_flight") is None:
        assert calls_in_flight() == before, "the test left an intercepted call in flight"
