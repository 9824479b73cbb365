"""The DuckDB schema as an ordered list of named migrations.

Each migration is applied once per database file and recorded in ``memtap_migrations``; opening
an existing file applies only the migrations it has not seen yet. Append new migrations to
:data:`MIGRATIONS`; never edit or reorder one that has shipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import duckdb

from memtap.sdk import Migration, run_migrations

__all__ = ["MIGRATIONS", "Migration", "apply_migrations"]


_INITIAL = Migration(
    "0001_initial",
    (
        """
        CREATE TABLE sessions (
            entity_id   VARCHAR NOT NULL,
            session_id  VARCHAR NOT NULL,
            process_id  VARCHAR,
            created_at  TIMESTAMPTZ NOT NULL,
            updated_at  TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (entity_id, session_id)
        )
        """,
        """
        CREATE TABLE exchanges (
            id                  VARCHAR PRIMARY KEY,
            seq                 BIGINT NOT NULL,
            entity_id           VARCHAR NOT NULL,
            session_id          VARCHAR NOT NULL,
            process_id          VARCHAR,
            provider            VARCHAR NOT NULL,
            operation           VARCHAR NOT NULL,
            request_model       VARCHAR,
            response_model      VARCHAR,
            system              VARCHAR,
            stream              BOOLEAN NOT NULL,
            status              VARCHAR NOT NULL,
            error               VARCHAR,
            finish_reasons      VARCHAR[] NOT NULL,
            input_tokens        BIGINT,
            output_tokens       BIGINT,
            cached_input_tokens BIGINT,
            input_count         INTEGER NOT NULL,
            started_at          TIMESTAMPTZ NOT NULL,
            ended_at            TIMESTAMPTZ NOT NULL,
            metadata            JSON
        )
        """,
        """
        CREATE TABLE messages (
            exchange_id  VARCHAR NOT NULL,
            exchange_seq BIGINT NOT NULL,  -- exchanges.seq, so history() needs no join
            entity_id    VARCHAR NOT NULL,
            session_id   VARCHAR NOT NULL,
            position     INTEGER NOT NULL,
            role         VARCHAR NOT NULL,
            content      VARCHAR NOT NULL,
            tool_calls   JSON,
            tool_call_id VARCHAR,
            name         VARCHAR,
            created_at   TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (exchange_id, position)
        )
        """,
        "CREATE INDEX messages_entity_session ON messages (entity_id, session_id)",
        """
        CREATE TABLE facts (
            id                 VARCHAR PRIMARY KEY,
            seq                BIGINT NOT NULL,
            entity_id          VARCHAR NOT NULL,
            process_id         VARCHAR,
            text               VARCHAR NOT NULL,
            kind               VARCHAR NOT NULL,
            source_exchange_id VARCHAR,
            supersedes         VARCHAR,
            superseded_by      VARCHAR,
            created_at         TIMESTAMPTZ NOT NULL,
            metadata           JSON,
            embedding          FLOAT[]
        )
        """,
        "CREATE INDEX facts_entity ON facts (entity_id)",
    ),
)

# Vectors live in their own table as float32 blobs: binding a FLOAT[] list parameter costs
# ~2 ms per 384-d vector in DuckDB's Python client (a blob, ~0.05 ms), and a separate table
# keeps the model that made each vector. (facts.embedding from 0001 stays unused.)
_EMBEDDINGS = Migration(
    "0002_fact_embeddings",
    (
        """
        CREATE TABLE fact_embeddings (
            fact_id   VARCHAR PRIMARY KEY,
            entity_id VARCHAR NOT NULL,
            model     VARCHAR NOT NULL,
            dim       INTEGER NOT NULL,
            vector    BLOB NOT NULL  -- float32, little-endian, dim values
        )
        """,
        "CREATE INDEX fact_embeddings_entity ON fact_embeddings (entity_id)",
    ),
)

# What memtap injected into each call (memtap explain): JSON, NULL when nothing was.
_INJECTED = Migration("0003_exchange_injected", ("ALTER TABLE exchanges ADD COLUMN injected JSON",))

#: Every migration, in the order it must be applied.
MIGRATIONS: tuple[Migration, ...] = (_INITIAL, _EMBEDDINGS, _INJECTED)


@contextlib.contextmanager
def _transaction(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    conn.begin()
    try:
        yield
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def apply_migrations(
    conn: duckdb.DuckDBPyConnection, migrations: Sequence[Migration] = MIGRATIONS
) -> list[str]:
    """Apply the migrations ``conn``'s database has not recorded yet, in order, in one
    transaction (all or none), and return the names applied (core's runner,
    ``memtap.sdk.run_migrations``)."""
    return run_migrations(conn, migrations, transaction=lambda: _transaction(conn))
