"""The storage SDK: what a storage backend (a ``memtap_store`` plugin) imports from core.

A backend implements :class:`Store` (the protocol; ``memtap.testing.storage_suite`` checks
it) and may offer the optional extras the protocol names:

- **sessions and the change feed**: :class:`SessionWatchers` (the bookkeeping of
  ``watch_sessions`` for a store one process owns), :class:`StoreChange`,
  :data:`EVERYTHING`, :class:`ChangeWatchers` and :data:`ChangeCallback` (``watch_changes``
  for a store several processes write to);
- **SQL rows**: the ``*_SELECT`` column lists and the ``sql_*`` row helpers shared by the SQL
  backends (DuckDB, PostgreSQL), :func:`injected_to_json` / :func:`injected_from_json` (an
  exchange's injected blocks as stored), :func:`exchange_messages`;
- **files**: :data:`DUCKDB_SCHEME`, :func:`duckdb_path`, and :func:`private_dir`,
  :func:`make_private`, :func:`create_private_file` (a store's files readable by their owner
  only);
- **errors**: :class:`RecordRefusedError` (a write refused for what its records hold),
  :class:`StoreLockedError` with :data:`LOCKED_STORE_WAYS_OUT`.

The names in ``__all__`` follow semantic versioning, like :mod:`memtap.sdk`'s.
"""

from __future__ import annotations

from memtap.capture.private import create_private_file, make_private, private_dir
from memtap.errors import LOCKED_STORE_WAYS_OUT, RecordRefusedError, StoreLockedError
from memtap.protocol.model import injected_from_json, injected_to_json
from memtap.storage.changes import EVERYTHING, ChangeCallback, ChangeWatchers, StoreChange
from memtap.storage.migrations import Migration, run_migrations
from memtap.storage.sqlrows import EXCHANGE_SELECT, FACT_SELECT, MESSAGE_SELECT
from memtap.storage.sqlrows import columns as sql_columns
from memtap.storage.sqlrows import exchange as sql_exchange
from memtap.storage.sqlrows import fact as sql_fact
from memtap.storage.sqlrows import injected_json as sql_injected_json
from memtap.storage.sqlrows import message as sql_message
from memtap.storage.sqlrows import session_rows as sql_session_rows
from memtap.storage.sqlrows import unique as sql_unique
from memtap.storage.sqlrows import utc as sql_utc
from memtap.storage.store import DUCKDB_SCHEME, SessionWatchers, Store, duckdb_path, exchange_messages

__all__ = [  # noqa: RUF022 (grouped as in the docstring, not one alphabetical list)
    # the protocol
    "Store",
    # sessions and the change feed
    "SessionWatchers",
    "StoreChange",
    "EVERYTHING",
    "ChangeWatchers",
    "ChangeCallback",
    # migrations
    "Migration",
    "run_migrations",
    # SQL rows
    "EXCHANGE_SELECT",
    "FACT_SELECT",
    "MESSAGE_SELECT",
    "sql_columns",
    "sql_exchange",
    "sql_fact",
    "sql_injected_json",
    "sql_message",
    "sql_session_rows",
    "sql_unique",
    "sql_utc",
    "injected_from_json",
    "injected_to_json",
    "exchange_messages",
    # files
    "DUCKDB_SCHEME",
    "duckdb_path",
    "create_private_file",
    "make_private",
    "private_dir",
    # errors
    "RecordRefusedError",
    "StoreLockedError",
    "LOCKED_STORE_WAYS_OUT",
]
