"""Applying a SQL backend's schema as ordered, named migrations (what DuckDB and PostgreSQL
share; each lists its own :class:`Migration` objects).

A migration is applied once per database (or schema) and recorded in the
``memtap_migrations`` ledger; :func:`run_migrations` applies every pending one in one
transaction, all or none. What differs between backends is a parameter: how a transaction
is opened, the driver's placeholder, the ledger's text type, and what runs first in the
transaction (PostgreSQL takes an advisory lock there, so processes starting at once migrate
one after the other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import attrs

from memtap.protocol.model import utcnow

__all__ = ["LEDGER_TABLE", "Migration", "run_migrations"]

#: The table recording which migrations a database has had.
LEDGER_TABLE = "memtap_migrations"


@attrs.frozen
class Migration:
    """A named, ordered schema change: SQL ``statements`` run in the migrating transaction,
    then ``run`` (if given, with the connection) for changes that depend on the server
    (e.g. an extension). Never edit or reorder one that has shipped: append a new one."""

    name: str
    statements: tuple[str, ...] = ()
    run: Callable[[Any], None] | None = None


def run_migrations(
    conn: Any,
    migrations: Sequence[Migration],
    *,
    transaction: Callable[[], AbstractContextManager[object]],
    placeholder: str = "?",
    text_type: str = "VARCHAR",
    prepare: Callable[[], None] | None = None,
) -> list[str]:
    """Apply the ``migrations`` ``conn``'s database has not recorded yet, in order, inside
    ``transaction()`` (which commits, or rolls back on an error: all or none), and return
    the names applied. ``conn.execute(sql[, params])`` runs SQL (DuckDB's and psycopg's
    connections both do); ``placeholder`` is the driver's (``?``, ``%s``), ``text_type``
    the ledger's name column type; ``prepare`` runs first in the transaction (a lock, the
    schema to create)."""
    with transaction():
        if prepare is not None:
            prepare()
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} ("
            f" name {text_type} PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
        )
        done = {name for (name,) in conn.execute(f"SELECT name FROM {LEDGER_TABLE}").fetchall()}
        applied: list[str] = []
        for migration in migrations:
            if migration.name in done:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            if migration.run is not None:
                migration.run(conn)
            conn.execute(
                f"INSERT INTO {LEDGER_TABLE} (name, applied_at) VALUES ({placeholder}, {placeholder})",
                [migration.name, utcnow()],
            )
            applied.append(migration.name)
    return applied
