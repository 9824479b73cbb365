"""memtap's PostgreSQL storage backend (store URLs ``postgresql://...`` and ``postgres://...``).

One database shared by every process on every host: writes are idempotent (``ON CONFLICT DO
NOTHING`` by exchange and fact id), each batch is one transaction, and the schema is migrated
under an advisory lock so that many processes may start at once. The URL is a libpq URI;
memtap adds one query parameter of its own, ``schema=NAME`` (created if missing), to keep
several stores apart in one database::

    postgresql://user:secret@db.internal:5432/memtap
    postgresql://postgres@127.0.0.1/test?schema=team_a

psycopg is imported only when a store is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.sdk import hookimpl

from .urls import SCHEMES, is_postgres_url

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["PostgresStore", "is_postgres_url", "memtap_open_store", "memtap_store_schemes"]


@hookimpl
def memtap_open_store(url: str) -> PostgresStore | None:
    """Open (migrating as needed) the PostgreSQL store a ``postgresql:`` URL names."""
    if not is_postgres_url(url):
        return None
    from .store import PostgresStore

    return PostgresStore(url)


@hookimpl
def memtap_store_schemes() -> list[str]:
    """This plugin answers ``postgresql:`` and ``postgres:`` URLs."""
    return list(SCHEMES)


def __getattr__(name: str) -> Any:
    # `from memtap_postgres import PostgresStore` without `import memtap_postgres` paying
    # for psycopg.
    if name == "PostgresStore":
        from .store import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
