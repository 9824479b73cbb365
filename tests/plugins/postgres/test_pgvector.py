"""pgvector for real: on a server with the ``vector`` extension (the throwaway server of
memtap_postgres.testing when the test server has none), a store keeps its vectors in a
``vector`` column with an HNSW index, and finds an entity's nearest facts on the server."""

from __future__ import annotations

import math
import random

import psycopg
import pytest
from postgres_support import with_schema

from memtap.testing.storage_suite import make_fact
from memtap_postgres import PostgresStore

DIM = 8


def _vector(seed: int) -> list[float]:
    rng = random.Random(seed)
    v = [rng.uniform(-1, 1) for _ in range(DIM)]
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def _catalog(url: str, schema: str) -> tuple[str | None, list[str]]:
    """The type of ``fact_embeddings.vec`` in ``schema`` (None without the column) and the
    access methods of the table's indexes on it."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
            " JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = 'fact_embeddings' AND a.attname = 'vec'"
            " AND NOT a.attisdropped",
            [schema],
        ).fetchone()
        methods = conn.execute(
            "SELECT am.amname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid"
            " JOIN pg_am am ON am.oid = ic.relam JOIN pg_class t ON t.oid = i.indrelid"
            " JOIN pg_namespace n ON n.oid = t.relnamespace"
            " WHERE n.nspname = %s AND t.relname = 'fact_embeddings'"
            " AND pg_get_indexdef(i.indexrelid) LIKE '%%vec%%'",
            [schema],
        ).fetchall()
    return (row[0] if row else None), sorted(m for (m,) in methods)


def _embedded_store(url: str, n: int = 40) -> tuple[PostgresStore, list[str]]:
    store = PostgresStore(url)
    facts = [make_fact(i, text=f"fact number {i}") for i in range(n)]
    store.add_facts(facts)
    store.set_embeddings({f.id: _vector(i) for i, f in enumerate(facts)}, model="m")
    return store, [f.id for f in facts]


def test_vector_column_and_hnsw_index(vector_database: str) -> None:
    store, _ = _embedded_store(vector_database)
    try:
        assert store.pgvector
        kind, methods = _catalog(vector_database, "public")
        assert kind is not None and kind.endswith("vector"), kind
        assert methods == ["hnsw"]
    finally:
        store.close()


def test_extension_in_another_schema_and_a_store_schema(vector_database: str) -> None:
    """The extension already in ``public`` and a store in its own schema (whose search path
    is that schema only): the store still gets the column and the index."""
    with psycopg.connect(vector_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector SCHEMA public")
    url = with_schema(vector_database, "team_a")
    store, ids = _embedded_store(url)
    try:
        assert store.pgvector
        kind, methods = _catalog(vector_database, "team_a")
        assert kind is not None and kind.endswith("vector"), kind
        assert methods == ["hnsw"]
        found = store.nearest_facts(entity_id="alice", vector=_vector(7), k=3, model="m")
        assert found[0][0].id == ids[7]
    finally:
        store.close()


def test_nearest_facts_are_the_server_side_search(vector_database: str) -> None:
    """nearest_facts() answers what brute force over the stored vectors answers, only the
    entity's current facts made by that model, and the planner can use the HNSW index."""
    store, ids = _embedded_store(vector_database)
    try:
        bob = make_fact(100, entity_id="bob", text="bob's fact")
        newer = make_fact(101, text="fact 3 again", supersedes=ids[3])
        store.add_facts([bob, newer])
        store.set_embeddings({bob.id: _vector(5), newer.id: _vector(1000)}, model="m")
        store.set_embeddings({ids[0]: _vector(5)}, model="other")  # replaces m's vector of fact 0
        query = _vector(5)
        found = store.nearest_facts(entity_id="alice", vector=query, k=5, model="m")
        current = {i: _vector(n) for n, i in enumerate(ids) if n not in (0, 3)} | {newer.id: _vector(1000)}

        def cos(v: list[float]) -> float:
            return sum(a * b for a, b in zip(v, query))

        want = sorted(current, key=lambda i: -cos(current[i]))[:5]
        assert [f.id for f, _ in found] == want
        assert all(abs(score - cos(current[f.id])) < 1e-5 for f, score in found)
        assert store.nearest_facts(entity_id="alice", vector=query, k=5, model="nobody") == []
        assert store.nearest_facts(entity_id="carol", vector=query, k=5, model="m") == []
        sql, params = store._nearest_query(entity_id="alice", vector=query, k=5, model="m")
        with psycopg.connect(vector_database) as conn:
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, params).fetchall())
        assert "fact_embeddings_vec_hnsw_8" in plan, plan
    finally:
        store.close()


def test_without_the_extension_nearest_facts_is_not_offered(pg_url: str) -> None:
    """On a server without pgvector (the machine's own, in CI) the store keeps ``REAL[]``
    only and says it cannot search on the server."""
    with psycopg.connect(pg_url.split("?")[0]) as conn:
        has = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    store = PostgresStore(pg_url)
    try:
        assert store.pgvector == bool(has)
        if not has:
            with pytest.raises(NotImplementedError):
                store.nearest_facts(entity_id="alice", vector=_vector(1), k=3, model="m")
    finally:
        store.close()
