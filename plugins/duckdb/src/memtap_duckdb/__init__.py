"""memtap's embedded DuckDB storage backend (store URLs ``duckdb:///path``).

``duckdb:///relative/path.duckdb`` is relative to the working directory,
``duckdb:////absolute/path.duckdb`` is absolute (``~`` is expanded) and ``duckdb:///:memory:``
is a private in-memory database. DuckDB itself is imported only when a store is opened.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from memtap.sdk import StoreError, hookimpl

if TYPE_CHECKING:
    from .store import DuckDBStore

__all__ = ["DuckDBStore", "memtap_open_store", "memtap_store_schemes", "path_from_url"]

SCHEME = "duckdb"
_MEMORY = ":memory:"
_FORMS = "duckdb:///relative/path.duckdb, duckdb:////absolute/path.duckdb or duckdb:///:memory:"


def path_from_url(url: str) -> str | None:
    """The database path a ``duckdb:`` URL names (``":memory:"`` for an in-memory store), or
    ``None`` when the URL has another scheme. Raises :class:`StoreError` for a malformed
    ``duckdb:`` URL."""
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() != SCHEME:
        return None
    if not rest.startswith("///") or len(rest) == 3:
        raise StoreError(f"bad DuckDB store URL {url!r}: write {_FORMS}")
    path = rest[3:]
    return path if path == _MEMORY else os.path.expanduser(path)


@hookimpl
def memtap_open_store(url: str) -> DuckDBStore | None:
    """Open (creating and migrating as needed) the DuckDB store a ``duckdb:`` URL names."""
    path = path_from_url(url)
    if path is None:
        return None
    from .store import DuckDBStore

    return DuckDBStore(path, url=url)


@hookimpl
def memtap_store_schemes() -> list[str]:
    """This plugin answers ``duckdb:`` URLs."""
    return [SCHEME]


def __getattr__(name: str) -> Any:
    # `from memtap_duckdb import DuckDBStore` works without making `import memtap_duckdb`
    # pay for importing duckdb.
    if name == "DuckDBStore":
        from .store import DuckDBStore

        return DuckDBStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
