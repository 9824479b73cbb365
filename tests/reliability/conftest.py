"""Shared fixtures of the reliability suite: the scripted server, stores on DuckDB and
PostgreSQL, OpenTelemetry metrics read through the SDK's InMemoryMetricReader."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_support import pg_base_url, read_counters, with_schema

from memtap.testing.server import ScriptedModelServer


@pytest.fixture(autouse=True)
def _clean(server: ScriptedModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server.clear()
    monkeypatch.setenv("MEMTAP_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEMTAP_SPOOL", raising=False)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL for the test's ``backend`` parameter (a DuckDB file, or a new
    PostgreSQL schema dropped afterwards)."""
    backend = getattr(request, "param", "duckdb")
    if backend == "duckdb":
        yield f"duckdb:///{tmp_path / 'memtap.duckdb'}"
        return
    base = pg_base_url()
    schema = f"memtap_rel_{uuid.uuid4().hex[:12]}"
    yield with_schema(base, schema)
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def counters() -> Callable[[], dict[tuple[str, str | None], int]]:
    """A function returning how much each memtap counter grew since the test started."""
    before = read_counters()

    def delta() -> dict[tuple[str, str | None], int]:
        now = read_counters()
        return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}

    return delta
