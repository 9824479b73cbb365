"""Helpers of the reliability suite (imported by its tests; fixtures live in conftest)."""

from __future__ import annotations

import os
from typing import Any

import pytest

PG_ENV = "MEMTAP_TEST_POSTGRES_URL"
PG_SKIP = (
    f"{PG_ENV} is not set: point it at a PostgreSQL server to run the PostgreSQL reliability "
    f"tests, e.g. {PG_ENV}=postgresql://postgres@127.0.0.1:5432/test"
)
API_KEY = "sk-proj-RELIABILITYsecret0123456789abcdef"
BACKENDS = ["duckdb", "postgres"]


def pg_base_url() -> str:
    """The test server's URL, or skip saying which variable to set."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(PG_SKIP)
    return url


def with_schema(url: str, schema: str) -> str:
    """``url`` with memtap's ``schema=`` parameter."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


_READER: Any = None


def _reader() -> Any:
    global _READER
    if _READER is None:
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        _READER = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
    return _READER


def read_counters() -> dict[tuple[str, str | None], int]:
    """Every memtap counter's cumulative value, by (name, reason)."""
    out: dict[tuple[str, str | None], int] = {}
    data = _reader().get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if not metric.name.startswith("memtap."):
                    continue
                for point in metric.data.data_points:
                    reason = dict(point.attributes or {}).get("memtap.reason")
                    key = (metric.name, reason)
                    out[key] = out.get(key, 0) + int(point.value)
    return out


def total(delta: dict[tuple[str, str | None], int], name: str) -> int:
    """Sum of a counter over every reason."""
    return sum(v for (n, _), v in delta.items() if n == name)
