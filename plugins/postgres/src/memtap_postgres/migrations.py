"""The PostgreSQL schema as an ordered list of named migrations (the same tables, columns and
migration names as the DuckDB backend, plus full-text search columns and, where the server
has pgvector, a ``vector`` column: ``0003_pgvector_column`` is PostgreSQL's own).

Each migration is applied once per schema and recorded in ``memtap_migrations``. Opening runs
every pending migration in one transaction that first takes a transaction-scoped advisory
lock, so processes starting at once on many hosts migrate one after the other: the first
applies, the rest find nothing left to do. Append new migrations to :data:`MIGRATIONS`;
never edit or reorder one that has shipped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memtap.sdk import Migration, run_migrations

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("memtap.postgres")

#: Text-search configuration of the ``tsv`` columns (English stemming: "dogs" finds "dog").
TS_CONFIG = "english"


_INITIAL = Migration(
    "0001_initial",
    (
        """
        CREATE TABLE sessions (
            entity_id   TEXT NOT NULL,
            session_id  TEXT NOT NULL,
            process_id  TEXT,
            created_at  TIMESTAMPTZ NOT NULL,
            updated_at  TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (entity_id, session_id)
        )
        """,
        """
        CREATE TABLE exchanges (
            id                  TEXT PRIMARY KEY,
            seq                 BIGINT GENERATED ALWAYS AS IDENTITY,
            entity_id           TEXT NOT NULL,
            session_id          TEXT NOT NULL,
            process_id          TEXT,
            provider            TEXT NOT NULL,
            operation           TEXT NOT NULL,
            request_model       TEXT,
            response_model      TEXT,
            system              TEXT,
            stream              BOOLEAN NOT NULL,
            status              TEXT NOT NULL,
            error               TEXT,
            finish_reasons      TEXT[] NOT NULL,
            input_tokens        BIGINT,
            output_tokens       BIGINT,
            cached_input_tokens BIGINT,
            input_count         INTEGER NOT NULL,
            started_at          TIMESTAMPTZ NOT NULL,
            ended_at            TIMESTAMPTZ NOT NULL,
            metadata            JSONB
        )
        """,
        "CREATE INDEX exchanges_order ON exchanges (started_at, seq)",
        "CREATE INDEX exchanges_entity_session ON exchanges (entity_id, session_id)",
        f"""
        CREATE TABLE messages (
            exchange_id  TEXT NOT NULL,
            exchange_seq BIGINT NOT NULL,  -- exchanges.seq, so history() needs no join
            entity_id    TEXT NOT NULL,
            session_id   TEXT NOT NULL,
            position     INTEGER NOT NULL,
            role         TEXT NOT NULL,
            content      TEXT NOT NULL,
            tool_calls   JSONB,
            tool_call_id TEXT,
            name         TEXT,
            created_at   TIMESTAMPTZ NOT NULL,
            tsv          TSVECTOR GENERATED ALWAYS AS (to_tsvector('{TS_CONFIG}', content)) STORED,
            PRIMARY KEY (exchange_id, position)
        )
        """,
        "CREATE INDEX messages_entity_session ON messages (entity_id, session_id)",
        "CREATE INDEX messages_tsv ON messages USING GIN (tsv)",
        f"""
        CREATE TABLE facts (
            id                 TEXT PRIMARY KEY,
            seq                BIGINT GENERATED ALWAYS AS IDENTITY,
            entity_id          TEXT NOT NULL,
            process_id         TEXT,
            text               TEXT NOT NULL,
            kind               TEXT NOT NULL,
            source_exchange_id TEXT,
            supersedes         TEXT,
            superseded_by      TEXT,
            created_at         TIMESTAMPTZ NOT NULL,
            metadata           JSONB,
            embedding          REAL[],
            tsv                TSVECTOR GENERATED ALWAYS AS (to_tsvector('{TS_CONFIG}', text)) STORED
        )
        """,
        "CREATE INDEX facts_entity ON facts (entity_id)",
        "CREATE INDEX facts_tsv ON facts USING GIN (tsv)",
    ),
)


def vector_schema(conn: psycopg.Connection) -> str | None:
    """The quoted name of the schema the ``vector`` extension is installed in (its type and
    operators are found there, whatever the connection's ``search_path``), or ``None``."""
    row = conn.execute(
        "SELECT quote_ident(n.nspname) FROM pg_extension e"
        " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()
    return str(row[0]) if row else None


def _pgvector(conn: psycopg.Connection) -> None:
    """Add a pgvector copy of each vector when the server has the extension (and this user
    may create it); otherwise nothing: the ``REAL[]`` column is the documented fallback
    (vectors are scored in process by memtap's recall index either way).

    The type is named with the extension's schema: a store with ``schema=NAME`` searches
    only its own schema, and the extension is often installed in another (``public``)."""
    available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if not available:
        return
    try:
        with conn.transaction():  # a savepoint: no privilege to create it is not an error
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            schema = vector_schema(conn)
            if schema is not None:
                conn.execute(f"ALTER TABLE fact_embeddings ADD COLUMN IF NOT EXISTS vec {schema}.vector")  # type: ignore[arg-type]
    except Exception:  # psycopg.Error, imported lazily
        log.warning("the vector extension is available but could not be used", exc_info=True)
        return


# The same table as DuckDB's 0002 (there a float32 blob, here REAL[]): one vector per fact,
# with the model that made it. facts.embedding from 0001 stays unused.
_EMBEDDINGS = Migration(
    "0002_fact_embeddings",
    (
        """
        CREATE TABLE fact_embeddings (
            fact_id   TEXT PRIMARY KEY,
            entity_id TEXT NOT NULL,
            model     TEXT NOT NULL,
            dim       INTEGER NOT NULL,
            vector    REAL[] NOT NULL
        )
        """,
        "CREATE INDEX fact_embeddings_entity ON fact_embeddings (entity_id)",
    ),
    run=_pgvector,
)

# Stores opened before the type was schema-qualified, with the extension in another schema
# than theirs, have no ``vec`` column: add it (a no-op where 0002 added it).
_PGVECTOR = Migration("0003_pgvector_column", run=_pgvector)

# What memtap injected into each call (memtap explain): JSON, NULL when nothing was.
_INJECTED = Migration("0004_exchange_injected", ("ALTER TABLE exchanges ADD COLUMN injected JSONB",))

#: Every migration, in the order it must be applied.
MIGRATIONS: tuple[Migration, ...] = (_INITIAL, _EMBEDDINGS, _PGVECTOR, _INJECTED)

#: Advisory-lock namespace: the lock key is this plus the schema, hashed by the server.
LOCK_NAMESPACE = "memtap.migrations:"


def apply_migrations(
    conn: psycopg.Connection,
    migrations: Sequence[Migration] = MIGRATIONS,
    *,
    schema: str | None = None,
) -> list[str]:
    """Apply the migrations the connection's schema has not recorded yet, in order, in one
    transaction under an advisory lock (all or none), and return the names applied (core's
    runner, ``memtap.sdk.run_migrations``).

    With ``schema``, the schema is created first if it does not exist.
    """

    def lock_and_create_schema() -> None:
        key = LOCK_NAMESPACE + (schema or "")
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [key])
        if schema is not None:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')

    return run_migrations(
        conn,
        migrations,
        transaction=conn.transaction,
        placeholder="%s",
        text_type="TEXT",
        prepare=lock_and_create_schema,
    )
