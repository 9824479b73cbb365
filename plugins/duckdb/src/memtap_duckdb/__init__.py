"""memtap's embedded DuckDB storage backend (store URLs ``duckdb:///path``).

``duckdb:///relative/path.duckdb`` is relative to the working directory,
``duckdb:////absolute/path.duckdb`` is absolute (``~`` is expanded) and ``duckdb:///:memory:``
is a private in-memory database. DuckDB itself is imported only when a store is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.sdk import hookimpl
from memtap.sdk.storage import DUCKDB_SCHEME, duckdb_path

if TYPE_CHECKING:
    from .store import DuckDBStore

__all__ = ["DuckDBStore", "memtap_open_store", "memtap_store_schemes", "path_from_url"]

SCHEME = DUCKDB_SCHEME
#: The database path a ``duckdb:`` URL names (core parses them: its default store is DuckDB).
path_from_url = duckdb_path


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
