"""The DuckDB storage backend: one embedded database file (or ``:memory:``) per store.

One writer connection, guarded by a lock, runs every write as a single transaction. Reads run
on cursors (DuckDB's per-thread connections to the same database) taken from a small pool, so
readers never wait for writers and never share a cursor between threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from memtap.sdk import Exchange, Fact, Message, SessionInfo, StoreError, native_work
from memtap.sdk.storage import EXCHANGE_SELECT as _EXCHANGE_SELECT
from memtap.sdk.storage import FACT_SELECT as _FACT_SELECT
from memtap.sdk.storage import (
    LOCKED_STORE_WAYS_OUT,
    RecordRefusedError,
    SessionWatchers,
    StoreLockedError,
    create_private_file,
    exchange_messages,
    make_private,
    private_dir,
)
from memtap.sdk.storage import MESSAGE_SELECT as _MESSAGE_SELECT
from memtap.sdk.storage import sql_columns as _columns
from memtap.sdk.storage import sql_exchange as _exchange
from memtap.sdk.storage import sql_fact as _fact
from memtap.sdk.storage import sql_injected_json as _injected_json
from memtap.sdk.storage import sql_message as _message
from memtap.sdk.storage import sql_session_rows as _session_rows
from memtap.sdk.storage import sql_unique as _unique
from memtap.sdk.storage import sql_utc as _utc

from .migrations import apply_migrations

#: The path that opens a private in-memory database instead of a file.
MEMORY = ":memory:"

_FETCH_ROWS = 2048
#: DuckDB errors that refuse a write for what its records hold (text it cannot convert, a
#: value out of range, a constraint), not because the database is unavailable.
_REFUSALS = (
    duckdb.InvalidInputException,
    duckdb.ConversionException,
    duckdb.OutOfRangeException,
    duckdb.ConstraintException,
    duckdb.TypeMismatchException,
)

_EXCHANGE_COLUMNS = (
    ("id", "VARCHAR"),
    ("seq", "BIGINT"),
    ("entity_id", "VARCHAR"),
    ("session_id", "VARCHAR"),
    ("process_id", "VARCHAR"),
    ("provider", "VARCHAR"),
    ("operation", "VARCHAR"),
    ("request_model", "VARCHAR"),
    ("response_model", "VARCHAR"),
    ("system", "VARCHAR"),
    ("stream", "BOOLEAN"),
    ("status", "VARCHAR"),
    ("error", "VARCHAR"),
    ("finish_reasons", "VARCHAR[]"),
    ("input_tokens", "BIGINT"),
    ("output_tokens", "BIGINT"),
    ("cached_input_tokens", "BIGINT"),
    ("input_count", "INTEGER"),
    ("started_at", "TIMESTAMPTZ"),
    ("ended_at", "TIMESTAMPTZ"),
    ("metadata", "JSON"),
    ("injected", "JSON"),
)
_MESSAGE_COLUMNS = (
    ("exchange_id", "VARCHAR"),
    ("exchange_seq", "BIGINT"),
    ("entity_id", "VARCHAR"),
    ("session_id", "VARCHAR"),
    ("position", "INTEGER"),
    ("role", "VARCHAR"),
    ("content", "VARCHAR"),
    ("tool_calls", "JSON"),
    ("tool_call_id", "VARCHAR"),
    ("name", "VARCHAR"),
    ("created_at", "TIMESTAMPTZ"),
)
_SESSION_COLUMNS = (
    ("entity_id", "VARCHAR"),
    ("session_id", "VARCHAR"),
    ("process_id", "VARCHAR"),
    ("created_at", "TIMESTAMPTZ"),
    ("updated_at", "TIMESTAMPTZ"),
)
_FACT_COLUMNS = (
    ("id", "VARCHAR"),
    ("seq", "BIGINT"),
    ("entity_id", "VARCHAR"),
    ("process_id", "VARCHAR"),
    ("text", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("source_exchange_id", "VARCHAR"),
    ("supersedes", "VARCHAR"),
    ("superseded_by", "VARCHAR"),
    ("created_at", "TIMESTAMPTZ"),
    ("metadata", "JSON"),
)


def _bulk_insert(table: str, columns: Sequence[tuple[str, str]], suffix: str = "") -> str:
    # One list parameter per column, zipped back into rows by parallel unnest(): ~80x faster
    # than executemany, which DuckDB runs as one statement per row.
    names = ", ".join(name for name, _ in columns)
    values = ", ".join(f"unnest(?::{sql_type}[])" for _, sql_type in columns)
    return f"INSERT INTO {table} ({names}) SELECT * FROM (SELECT {values}) {suffix}"


_INSERT_EXCHANGES = _bulk_insert("exchanges", _EXCHANGE_COLUMNS)
_INSERT_MESSAGES = _bulk_insert("messages", _MESSAGE_COLUMNS)
_UPSERT_SESSIONS = _bulk_insert(
    "sessions",
    _SESSION_COLUMNS,
    """ON CONFLICT (entity_id, session_id) DO UPDATE SET
        process_id = CASE WHEN excluded.created_at < sessions.created_at
                          THEN excluded.process_id ELSE sessions.process_id END,
        created_at = least(sessions.created_at, excluded.created_at),
        updated_at = greatest(sessions.updated_at, excluded.updated_at)""",
)
_INSERT_FACTS = _bulk_insert("facts", _FACT_COLUMNS)
# A fact may only supersede a fact of its own entity, and only once (the first claim wins).
_MARK_SUPERSEDED = """
UPDATE facts SET superseded_by = s.new_id
FROM (SELECT unnest(?::VARCHAR[]) AS old_id, unnest(?::VARCHAR[]) AS new_id,
             unnest(?::VARCHAR[]) AS entity_id) AS s
WHERE facts.id = s.old_id AND facts.entity_id = s.entity_id AND facts.superseded_by IS NULL
"""


def _dump(value: Any) -> str | None:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value else None


def _exchange_rows(batch: Sequence[Exchange], first_seq: int) -> list[tuple[Any, ...]]:
    rows = []
    for seq, ex in enumerate(batch, first_seq):
        a, u = ex.attribution, ex.usage
        rows.append((
            ex.id, seq, a.entity_id, a.session_id, a.process_id, ex.provider, ex.operation,
            ex.request_model, ex.response_model, ex.system, ex.stream, ex.status, ex.error,
            list(ex.finish_reasons), u.input_tokens, u.output_tokens, u.cached_input_tokens,
            len(ex.input), _utc(ex.started_at), _utc(ex.ended_at), _dump(ex.metadata),
            _injected_json(ex),
        ))  # fmt: skip
    return rows


def _message_rows(batch: Sequence[Exchange], first_seq: int) -> list[tuple[Any, ...]]:
    rows = []
    for seq, ex in enumerate(batch, first_seq):
        a = ex.attribution
        for position, m in enumerate(exchange_messages(ex)):
            calls = [{"id": c.id, "name": c.name, "arguments": c.arguments, "type": c.type}
                     for c in m.tool_calls]  # fmt: skip
            rows.append((
                ex.id, seq, a.entity_id, a.session_id, position, m.role, m.content, _dump(calls),
                m.tool_call_id, m.name, _utc(ex.started_at),
            ))  # fmt: skip
    return rows


def _fact_rows(facts: Sequence[Fact], first_seq: int) -> list[tuple[Any, ...]]:
    return [
        (f.id, seq, f.entity_id, f.process_id, f.text, f.kind, f.source_exchange_id,
         f.supersedes, f.superseded_by, _utc(f.created_at), _dump(f.metadata))
        for seq, f in enumerate(facts, first_seq)
    ]  # fmt: skip


def _vector_blob(vector: Sequence[float]) -> bytes:
    """A vector as little-endian float32 bytes (numpy arrays and lists alike)."""
    tobytes = getattr(vector, "astype", None)
    if tobytes is not None:
        return bytes(vector.astype("<f4").tobytes())  # type: ignore[attr-defined]
    return array("f", vector).tobytes()


#: How pybind11 (duckdb 1.x) words a Python value it cannot hand to DuckDB.
_UNBINDABLE = "Unable to cast Python instance"


def _open_error(path: str, error: duckdb.Error) -> StoreError:
    detail = str(error)
    if "lock" in detail.lower():
        # The holder's pid, when DuckDB names it, instead of its raw "IO Error: ..." text.
        holder = re.search(r"\(PID (\d+)\)", detail)
        who = f"process {holder.group(1)}" if holder else "another process"
        return StoreLockedError(
            f"cannot open DuckDB store {path!r}: {who} has it open (DuckDB allows one "
            f"read-write process per file). Ways out: {LOCKED_STORE_WAYS_OUT}",
            identity=f"duckdb:{os.path.realpath(path)}",
        )
    if "not a valid DuckDB database" in detail:
        advice = "the file is not a DuckDB database; move it aside or choose another path"
    else:
        advice = "check that the path is a readable and writable DuckDB file"
    return StoreError(f"cannot open DuckDB store {path!r}: {advice}. ({detail})")


_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _write_lock_for(path: str) -> threading.Lock:
    """One write lock per database file per process: DuckDB gives every connection a process
    opens on a file the same database, where concurrent writers would conflict."""
    if path == MEMORY:
        return threading.Lock()
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(os.path.realpath(path), threading.Lock())


class DuckDBStore:
    """A :class:`memtap.sdk.storage.Store` in one DuckDB database file, or in memory.

    ``path`` is a file path (parent directories are created) or ``":memory:"``. Opening a
    file applies the schema migrations it lacks. Thread-safe; one process per file.
    """

    def __init__(self, path: str | os.PathLike[str] = MEMORY, *, url: str | None = None) -> None:
        self.path = os.fspath(path)
        self.url = url or f"duckdb:///{self.path}"
        self._write_lock = _write_lock_for(self.path)
        self._pool_lock = threading.Lock()
        self._idle: list[duckdb.DuckDBPyConnection] = []
        self._closed = False
        self._watchers = SessionWatchers()
        #: DuckDB locks its file for one process: every session written goes through here.
        self.watch_sessions = self._watchers.watch
        if self.path != MEMORY:
            try:
                private_dir(Path(self.path).parent)
            except OSError as e:
                raise StoreError(
                    f"cannot create the directory for DuckDB store {self.path!r}: {e}; "
                    "choose a writable location"
                ) from e
        try:
            self._conn = duckdb.connect(self.path)
        except duckdb.Error as e:
            raise _open_error(self.path, e) from e
        try:
            with self._write_lock:
                #: Names of the migrations this open applied (empty when the file was current).
                self.applied_migrations = apply_migrations(self._conn)
                self._keep_files_private(database=True)
        except duckdb.Error as e:
            self._conn.close()
            raise StoreError(f"cannot migrate DuckDB store {self.path!r}: {e}") from e

    def _keep_files_private(self, *, database: bool = False) -> None:
        """The database file and its write-ahead log readable by their owner only (0600),
        whatever the umask. DuckDB creates the log with the umask's mode at the first write
        after each checkpoint, and reuses one that exists: so after every write an empty
        0600 log is put in place of a checkpointed one (writes hold the write lock, so none
        can slip in between). Files of another owner are left as they are."""
        if self.path == MEMORY:
            return
        if database:
            make_private(self.path)
        wal = self.path + ".wal"
        if not make_private(wal):
            create_private_file(wal)

    def __repr__(self) -> str:
        return f"DuckDBStore({self.path!r})"

    # -- plumbing ------------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.url} is closed; open a new store (or memtap.Memory)")

    @contextlib.contextmanager
    def _errors(self, action: str, *, writing: bool = False) -> Iterator[None]:
        try:
            yield
        except duckdb.Error as e:
            self._check()  # a query cut off by close() reports the closed store
            refused = writing and isinstance(e, _REFUSALS)
            error = RecordRefusedError if refused else StoreError
            raise error(f"DuckDB store {self.path!r}: {action} failed: {e}") from e
        except (TypeError, ValueError) as e:
            if not writing:
                raise
            # A value the rows cannot be made of (metadata JSON cannot hold, a number out of
            # range): the records' fault, not the store's.
            raise RecordRefusedError(f"DuckDB store {self.path!r}: {action} failed: {e}") from e
        except RuntimeError as e:
            # duckdb 1.x (the last for Python 3.10) reports a parameter it cannot bind, such
            # as text with a lone surrogate, with pybind11's cast error, not a duckdb.Error.
            if not (writing and str(e).startswith(_UNBINDABLE)):
                raise
            raise RecordRefusedError(f"DuckDB store {self.path!r}: {action} failed: {e}") from e

    @contextlib.contextmanager
    def _transaction(self, action: str) -> Iterator[duckdb.DuckDBPyConnection]:
        # Units of native work: DuckDB is C++, and memtap's background threads (the
        # writer, the index loader) call it; interpreter exit waits for a statement in
        # flight, which aborts the process if its thread is ended inside it.
        with native_work(), self._write_lock:
            self._check()
            with self._errors(action, writing=True):
                self._conn.begin()
                try:
                    yield self._conn
                    self._conn.commit()
                except BaseException:
                    with contextlib.suppress(duckdb.Error):
                        self._conn.rollback()
                    raise
                finally:
                    self._keep_files_private()

    @contextlib.contextmanager
    def _reader(self, action: str, *, across_yields: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A pooled cursor, as one unit of native work (see :meth:`_transaction`); with
        ``across_yields`` (a generator's cursor, which its consumer may hold for long, or
        drop unfinished) the unit covers taking and returning it only, and the generator
        runs each statement in a unit of its own."""
        with native_work(), self._pool_lock:
            self._check()
            with self._errors(action):
                cursor = self._idle.pop() if self._idle else self._conn.cursor()
        try:
            with contextlib.nullcontext() if across_yields else native_work(), self._errors(action):
                yield cursor
        finally:
            with native_work(), self._pool_lock:
                if self._closed:
                    with contextlib.suppress(duckdb.Error):
                        cursor.close()
                else:
                    self._idle.append(cursor)

    @staticmethod
    def _allocate(conn: duckdb.DuckDBPyConnection, table: str, items: Sequence[Any]) -> tuple[list[Any], int]:
        """The ``items`` whose ids ``table`` lacks, and the first free ``seq`` for them."""
        # A check-then-insert under the write lock costs half of INSERT ... ON CONFLICT.
        row = conn.execute(
            f"SELECT (SELECT coalesce(max(seq), 0) FROM {table}),"
            f" (SELECT list(id) FROM {table} WHERE id IN (SELECT unnest(?::VARCHAR[])))",
            [[item.id for item in items]],
        ).fetchone()
        last, known = (row[0], set(row[1] or ())) if row else (0, set())
        return [item for item in items if item.id not in known], int(last) + 1

    # -- writes --------------------------------------------------------------------------

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """Store exchanges, their messages and sessions in one transaction, skipping ids
        already stored (and repeats within the batch: the first one wins)."""
        batch = _unique(exchanges)
        if not batch:
            self._check()
            return
        with self._transaction("writing exchanges") as conn:
            fresh, first = self._allocate(conn, "exchanges", batch)
            if not fresh:
                return
            rows = _exchange_rows(fresh, first)
            conn.execute(_INSERT_EXCHANGES, _columns(rows, len(_EXCHANGE_COLUMNS)))
            message_rows = _message_rows(fresh, first)
            if message_rows:
                conn.execute(_INSERT_MESSAGES, _columns(message_rows, len(_MESSAGE_COLUMNS)))
            session_rows = _session_rows(fresh)
            conn.execute(_UPSERT_SESSIONS, _columns(session_rows, len(_SESSION_COLUMNS)))
        self._watchers.wrote(fresh)

    def add_facts(self, facts: Sequence[Fact]) -> None:
        """Store facts, skipping known ids; a new fact that ``supersedes`` a stored fact of
        the same entity sets that fact's ``superseded_by`` (once: the first claim wins)."""
        batch = _unique(facts)
        if not batch:
            self._check()
            return
        with self._transaction("adding facts") as conn:
            fresh, first = self._allocate(conn, "facts", batch)
            if not fresh:
                return
            conn.execute(_INSERT_FACTS, _columns(_fact_rows(fresh, first), len(_FACT_COLUMNS)))
            claims: dict[str, Fact] = {}
            for f in fresh:
                if f.supersedes:
                    claims.setdefault(f.supersedes, f)
            if claims:
                conn.execute(
                    _MARK_SUPERSEDED,
                    [list(claims), [f.id for f in claims.values()],
                     [f.entity_id for f in claims.values()]],
                )  # fmt: skip

    def update_fact_context(self, facts: Sequence[Fact]) -> list[str]:
        """Give stored facts the context of these (matched by id, entity and source
        exchange: see :meth:`memtap.sdk.storage.Store.update_fact_context`); return the ids updated."""
        wanted = {f.id: f for f in facts}  # the last context given for an id wins
        if not wanted:
            self._check()
            return []
        with self._transaction("updating fact contexts") as conn:
            rows = conn.execute(
                f"SELECT {_FACT_SELECT} FROM facts WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(wanted)]
            ).fetchall()
            updated = [
                old.with_context_of(new)
                for old, new in ((_fact(row), wanted[row[0]]) for row in rows)
                if (old.entity_id, old.source_exchange_id) == (new.entity_id, new.source_exchange_id)
            ]
            if updated:
                conn.execute(
                    """UPDATE facts SET metadata = u.metadata
                       FROM (SELECT unnest(?::VARCHAR[]) AS id, unnest(?::JSON[]) AS metadata) u
                       WHERE facts.id = u.id""",
                    [[f.id for f in updated], [_dump(f.metadata) for f in updated]],
                )
        return [f.id for f in updated]

    def forget(self, *, entity_id: str) -> int:
        """Delete the entity's sessions, exchanges, messages and facts; return the number of
        exchanges plus facts deleted."""
        with self._transaction("forgetting an entity") as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM exchanges WHERE entity_id = $1),"
                " (SELECT count(*) FROM facts WHERE entity_id = $1)",
                [entity_id],
            ).fetchone()
            for table in ("messages", "exchanges", "sessions", "facts", "fact_embeddings"):
                conn.execute(f"DELETE FROM {table} WHERE entity_id = ?", [entity_id])
        return int(row[0]) + int(row[1]) if row else 0

    def forget_facts(self, *, entity_id: str, fact_ids: Sequence[str]) -> int:
        """Delete these facts of the entity and their vectors; return how many facts."""
        ids = list(dict.fromkeys(fact_ids))
        if not ids:
            self._check()
            return 0
        with self._transaction("forgetting facts") as conn:
            params = [entity_id, ids]
            row = conn.execute(
                "SELECT count(*) FROM facts WHERE entity_id = ? AND id IN (SELECT unnest(?::VARCHAR[]))",
                params,
            ).fetchone()
            for table, key in (("fact_embeddings", "fact_id"), ("facts", "id")):
                conn.execute(
                    f"DELETE FROM {table} WHERE entity_id = ? AND {key} IN (SELECT unnest(?::VARCHAR[]))",
                    params,
                )
        return int(row[0]) if row else 0

    # -- reads ---------------------------------------------------------------------------

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """The session's messages, oldest first (by exchange start, then position); with
        ``limit`` only the latest ``limit``; with ``entity_id`` only that entity's."""
        if limit is not None and limit <= 0:
            self._check()
            return []
        sql = f"SELECT {_MESSAGE_SELECT} FROM messages m WHERE m.session_id = $session"
        params: dict[str, Any] = {"session": session_id}
        if entity_id is not None:
            sql += " AND m.entity_id = $entity"
            params["entity"] = entity_id
        # m.created_at is the exchange's start; exchange_seq breaks ties in write order.
        order = ("m.created_at", "m.exchange_seq", "m.exchange_id", "m.position")
        if limit is None:
            sql += f" ORDER BY {', '.join(order)}"
        else:
            sql += f" ORDER BY {' DESC, '.join(order)} DESC LIMIT $n"
            params["n"] = limit
        with self._reader("reading history") as cur:
            rows = cur.execute(sql, params).fetchall()
        if limit is not None:
            rows.reverse()
        return [_message(row, stamped=True) for row in rows]

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """Sessions with their exchange counts, most recently active first."""
        where = "" if entity_id is None else "WHERE entity_id = $entity"
        params: dict[str, Any] = {"n": max(limit, 0)}
        if entity_id is not None:
            params["entity"] = entity_id
        sql = f"""
            SELECT s.session_id, s.entity_id, s.process_id, s.created_at, s.updated_at,
                   coalesce(c.n, 0)
            FROM (SELECT * FROM sessions {where}) s
            LEFT JOIN (SELECT entity_id, session_id, count(*) AS n FROM exchanges {where}
                       GROUP BY entity_id, session_id) c
              ON c.entity_id = s.entity_id AND c.session_id = s.session_id
            ORDER BY s.updated_at DESC, s.entity_id, s.session_id
            LIMIT $n
        """
        with self._reader("listing sessions") as cur:
            rows = cur.execute(sql, params).fetchall()
        return [
            SessionInfo(
                session_id=session, entity_id=entity, process_id=process,
                created_at=_utc(created), updated_at=_utc(updated), exchange_count=int(count),
            )
            for session, entity, process, created, updated, count in rows
        ]  # fmt: skip

    def exchanges(self, *, entity_id: str | None = None, session_id: str | None = None) -> Iterator[Exchange]:
        """Stored exchanges with their messages, oldest first, streamed from one query."""
        conditions: list[str] = []
        params: dict[str, Any] = {}
        if entity_id is not None:
            conditions.append("e.entity_id = $entity")
            params["entity"] = entity_id
        if session_id is not None:
            conditions.append("e.session_id = $session")
            params["session"] = session_id
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        sql = f"""
            SELECT {_EXCHANGE_SELECT}, m.position, {_MESSAGE_SELECT}
            FROM exchanges e LEFT JOIN messages m ON m.exchange_id = e.id
            {where}
            ORDER BY e.started_at, e.seq, e.id, m.position
        """
        width = len(_EXCHANGE_COLUMNS) - 1
        # The cursor stays open between yields, so it is not taken from (or returned to) the
        # pool: the consumer may never finish iterating.
        with self._pool_lock:
            self._check()
            with self._errors("exporting exchanges"):
                cur = self._conn.cursor()
        try:
            with self._errors("exporting exchanges"):
                cur.execute(sql, params)
            current: Sequence[Any] | None = None
            messages: list[Message] = []
            while True:
                with self._errors("exporting exchanges"):
                    chunk = cur.fetchmany(_FETCH_ROWS)
                if not chunk:
                    break
                for row in chunk:
                    if current is None or row[0] != current[0]:
                        if current is not None:
                            yield _exchange(current, messages)
                        current, messages = row[:width], []
                    if row[width] is not None:
                        messages.append(_message(row[width + 1 :], stamped=False))
            if current is not None:
                yield _exchange(current, messages)
        finally:
            with contextlib.suppress(duckdb.Error):
                cur.close()

    def exchange(self, exchange_id: str) -> Exchange | None:
        """The stored exchange with this id (with its messages and injected blocks), or ``None``."""
        sql = f"""
            SELECT {_EXCHANGE_SELECT}, m.position, {_MESSAGE_SELECT}
            FROM exchanges e LEFT JOIN messages m ON m.exchange_id = e.id
            WHERE e.id = $id ORDER BY m.position
        """
        with self._reader("reading an exchange") as cur:
            rows = cur.execute(sql, {"id": exchange_id}).fetchall()
        if not rows:
            return None
        width = len(_EXCHANGE_COLUMNS) - 1
        messages = [_message(row[width + 1 :], stamped=False) for row in rows if row[width] is not None]
        return _exchange(rows[0][:width], messages)

    def entities(self) -> list[str]:
        """Every entity with a session or a fact, sorted (used by ``memtap export``)."""
        sql = "SELECT entity_id FROM sessions UNION SELECT entity_id FROM facts ORDER BY 1"
        with self._reader("listing entities") as cur:
            rows = cur.execute(sql).fetchall()
        return [str(entity) for (entity,) in rows]

    def facts(
        self,
        *,
        entity_id: str,
        process_id: str | None = None,
        include_superseded: bool = False,
    ) -> list[Fact]:
        """The entity's facts, newest first (by ``created_at``, then latest written)."""
        sql = f"SELECT {_FACT_SELECT} FROM facts WHERE entity_id = $entity"
        params: dict[str, Any] = {"entity": entity_id}
        if process_id is not None:
            sql += " AND process_id = $process"
            params["process"] = process_id
        if not include_superseded:
            sql += " AND superseded_by IS NULL"
        sql += " ORDER BY created_at DESC, seq DESC"
        with self._reader("reading facts") as cur:
            rows = cur.execute(sql, params).fetchall()
        return [_fact(row) for row in rows]

    def set_embeddings(self, embeddings: Mapping[str, Sequence[float]], *, model: str) -> None:
        """Store vectors (float32 blobs) for known fact ids, replacing earlier ones."""
        if not embeddings:
            self._check()
            return
        ids = list(embeddings)
        blobs = [_vector_blob(v) for v in embeddings.values()]
        with self._transaction("storing embeddings") as conn:
            conn.execute("DELETE FROM fact_embeddings WHERE fact_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
            conn.execute(
                """INSERT INTO fact_embeddings (fact_id, entity_id, model, dim, vector)
                   SELECT s.id, f.entity_id, ?, octet_length(s.v) // 4, s.v
                   FROM (SELECT unnest(?::VARCHAR[]) AS id, unnest(?::BLOB[]) AS v) s
                   JOIN facts f ON f.id = s.id""",
                [model, ids, blobs],
            )

    def indexable_facts(
        self, *, entity_id: str, model: str | None = None
    ) -> list[tuple[Fact, Sequence[float] | None]]:
        """The entity's current facts, oldest first, with their ``model`` vectors."""
        sql = """
            SELECT f.id, f.entity_id, f.process_id, f.text, f.kind, f.source_exchange_id,
                   f.supersedes, f.superseded_by, f.created_at, f.metadata, e.vector
            FROM facts f LEFT JOIN fact_embeddings e ON e.fact_id = f.id AND e.model = $model
            WHERE f.entity_id = $entity AND f.superseded_by IS NULL
            ORDER BY f.created_at, f.seq
        """
        with self._reader("reading facts for recall") as cur:
            rows = cur.execute(sql, {"entity": entity_id, "model": model or ""}).fetchall()
        return [(_fact(row[:-1]), array("f", row[-1]) if row[-1] is not None else None) for row in rows]

    def stats(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``exchanges``, ``messages``, ``facts``."""
        names = ("sessions", "exchanges", "messages", "facts")
        sql = "SELECT " + ", ".join(f"(SELECT count(*) FROM {name})" for name in names)
        with self._reader("counting rows") as cur:
            row = cur.execute(sql).fetchone()
        return dict(zip(names, (int(n) for n in row or (0, 0, 0, 0))))

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """Every stored ``(entity_id, session_id)``."""
        with self._reader("listing sessions", across_yields=True) as cur:
            with native_work():
                cur.execute("SELECT entity_id, session_id FROM sessions")
            while True:
                with native_work():
                    rows = cur.fetchmany(_FETCH_ROWS)
                if not rows:
                    return
                yield from rows

    def identity(self) -> str | None:
        """The database file's real path (``None`` in memory): every URL or symlink
        naming the same file names the same store."""
        return None if self.path == MEMORY else f"duckdb:{os.path.realpath(self.path)}"

    def bound_memory(self, megabytes: int) -> None:
        """Cap what DuckDB may hold in memory (its buffer cache, checkpoints) at
        ``megabytes`` MB, for a bulk write such as ``memtap import-transcript``: left at
        DuckDB's default (80% of RAM), its cache grows with the file written, not with
        what the writes need."""
        with self._write_lock, self._errors("bounding memory"):
            self._check()
            self._conn.execute(f"SET memory_limit = '{int(megabytes)}MB'")

    def close(self) -> None:
        """Close the database (idempotent). Further calls raise :class:`StoreError`."""
        with self._write_lock, self._pool_lock:
            if self._closed:
                return
            self._closed = True
            for cursor in self._idle:
                with contextlib.suppress(duckdb.Error):
                    cursor.close()
            self._idle.clear()
            with contextlib.suppress(duckdb.Error):
                self._conn.close()
