"""Fixtures shared by the core tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memtap.protocol import json_encoder as encoder_module


@pytest.fixture(params=["pydantic-core", "standard-library"])
def json_encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs the test with each JSON encoder the spool may write with: pydantic-core's
    (installed with every provider SDK, and a test dependency: never skipped) and the
    standard library's (the proxy alone)."""
    import pydantic_core

    fast = None if request.param == "standard-library" else pydantic_core.to_json
    monkeypatch.setattr(encoder_module, "_fast_to_json", fast)
    yield request.param
