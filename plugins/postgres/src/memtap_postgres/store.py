"""The PostgreSQL storage backend: one database (or schema) shared by many processes.

Connections come from a psycopg_pool pool (autocommit; every write is one explicit
transaction). Writes are idempotent under concurrency: ``INSERT ... ON CONFLICT DO NOTHING
RETURNING`` decides which exchanges are new, and only their messages and session upserts
follow, in the same transaction. A transaction that loses a deadlock or serialization race
is retried.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg.errors
import psycopg_pool

from memtap.sdk import Exchange, Fact, Message, SessionInfo, StoreError
from memtap.sdk.storage import ChangeCallback, ChangeWatchers, StoreChange

from . import rows as R
from .errors import RETRYABLE, store_error
from .feed import ChangeListener, channel_name, notify
from .migrations import apply_migrations
from .settings import resolve_settings
from .urls import redact_url, split_schema, take_param
from .watchdog import Watchdog

log = logging.getLogger("memtap.postgres")

_PAGE = 500
_KEYS_PAGE = 20_000
_WRITE_ATTEMPTS = 5

_INSERT_EXCHANGES = """
INSERT INTO exchanges (id, entity_id, session_id, process_id, provider, operation, request_model,
    response_model, system, stream, status, error, finish_reasons, input_tokens, output_tokens,
    cached_input_tokens, input_count, started_at, ended_at, metadata, injected)
SELECT u.id, u.entity_id, u.session_id, u.process_id, u.provider, u.operation, u.request_model,
    u.response_model, u.system, u.stream, u.status, u.error,
    ARRAY(SELECT jsonb_array_elements_text(u.finish_reasons)), u.input_tokens, u.output_tokens,
    u.cached_input_tokens, u.input_count, u.started_at, u.ended_at, u.metadata, u.injected
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
            %s::text[], %s::text[], %s::boolean[], %s::text[], %s::text[], %s::jsonb[],
            %s::bigint[], %s::bigint[], %s::bigint[], %s::integer[], %s::timestamptz[],
            %s::timestamptz[], %s::jsonb[], %s::jsonb[])
     WITH ORDINALITY AS u(id, entity_id, session_id, process_id, provider, operation,
        request_model, response_model, system, stream, status, error, finish_reasons,
        input_tokens, output_tokens, cached_input_tokens, input_count, started_at, ended_at,
        metadata, injected, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id, seq
"""
_INSERT_MESSAGES = """
INSERT INTO messages (exchange_id, exchange_seq, entity_id, session_id, position, role, content,
    tool_calls, tool_call_id, name, created_at)
SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[], %s::integer[], %s::text[],
                     %s::text[], %s::jsonb[], %s::text[], %s::text[], %s::timestamptz[])
ON CONFLICT (exchange_id, position) DO NOTHING
"""
_UPSERT_SESSIONS = """
INSERT INTO sessions (entity_id, session_id, process_id, created_at, updated_at)
SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[])
ON CONFLICT (entity_id, session_id) DO UPDATE SET
    process_id = CASE WHEN excluded.created_at < sessions.created_at
                      THEN excluded.process_id ELSE sessions.process_id END,
    created_at = least(sessions.created_at, excluded.created_at),
    updated_at = greatest(sessions.updated_at, excluded.updated_at)
"""
_INSERT_FACTS = """
INSERT INTO facts (id, entity_id, process_id, text, kind, source_exchange_id, supersedes,
    superseded_by, created_at, metadata)
SELECT u.id, u.entity_id, u.process_id, u.text, u.kind, u.source_exchange_id, u.supersedes,
    u.superseded_by, u.created_at, u.metadata
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
            %s::text[], %s::timestamptz[], %s::jsonb[])
     WITH ORDINALITY AS u(id, entity_id, process_id, text, kind, source_exchange_id, supersedes,
        superseded_by, created_at, metadata, ord)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id
"""
# A fact may only supersede a fact of its own entity, and only once (the first claim wins).
_MARK_SUPERSEDED = """
UPDATE facts SET superseded_by = s.new_id
FROM unnest(%s::text[], %s::text[], %s::text[]) AS s(old_id, new_id, entity_id)
WHERE facts.id = s.old_id AND facts.entity_id = s.entity_id AND facts.superseded_by IS NULL
"""


class PostgresStore:
    """A :class:`memtap.sdk.storage.Store` in a PostgreSQL database.

    ``url`` is a libpq URI (``postgresql://user:password@host:port/dbname``), optionally with
    memtap's ``schema=NAME`` parameter. Opening connects once (so a wrong URL fails at once
    with a message saying what to do), applies pending migrations under an advisory lock,
    then serves every call from a pool of up to ``max_connections`` connections, waiting at
    most ``timeout`` seconds for one. Connections get connect and statement timeouts and TCP
    keepalives (:mod:`memtap_postgres.settings`: the URL, the environment, defaults;
    ``connect_timeout`` here wins over both). Thread-safe, and safe with any number of
    processes.

    Every write also notifies the other processes (:mod:`memtap_postgres.feed`):
    :meth:`watch_changes` hears what other store objects on the same schema changed.
    """

    #: PostgreSQL text and jsonb cannot hold NUL: memtap makes it U+FFFD at capture, in every
    #: string of an exchange (ids too), so that such a record is stored, not refused.
    unstorable_characters = "\x00"

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 8,
        timeout: float = 5.0,
        connect_timeout: int | None = None,
    ) -> None:
        self.url = url
        self._safe_url = redact_url(url)
        conninfo, statement_timeout = take_param(url, "statement_timeout")
        conninfo, self.schema = split_schema(conninfo)
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.Error as e:  # a malformed URI
            raise StoreError(f"bad PostgreSQL store URL {self._safe_url}: {e}") from e
        if connect_timeout is not None:  # the argument wins over the URL and the environment
            conninfo = psycopg.conninfo.make_conninfo(conninfo, connect_timeout=str(connect_timeout))
            params["connect_timeout"] = str(connect_timeout)
        #: Connect and statement timeouts, keepalives (URL, environment, defaults).
        self.settings = resolve_settings(params, statement_timeout)
        kwargs: dict[str, Any] = {"autocommit": True, **self.settings.libpq}
        try:
            with psycopg.connect(conninfo, **kwargs) as conn:
                #: Names of the migrations this open applied (empty when the schema was current).
                self.applied_migrations = apply_migrations(conn, schema=self.schema)
                self._identity = self._read_identity(conn)
        except psycopg.Error as e:
            raise store_error(url, "opening", e) from e
        except ValueError as e:  # a malformed URI
            raise StoreError(f"bad PostgreSQL store URL {self._safe_url}: {e}") from e
        self._watchdog = Watchdog("memtap-postgres")
        self._conninfo = conninfo
        self._connect_kwargs = {
            **kwargs,
            **self.settings.session_options(str(params.get("options") or "") or None),
        }
        #: This store object's name in the change feed (its own notifications are skipped).
        self._origin = uuid.uuid4().hex[:16]
        self._changes = ChangeWatchers()
        #: The change feed's listener, once :meth:`watch_changes` started it.
        self.feed: ChangeListener | None = None
        self._pool = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(1, max_connections),
            kwargs=self._connect_kwargs,
            timeout=timeout,
            # One round trip per checkout replaces connections a restarted server broke.
            check=self._check_connection,
            open=False,
            name="memtap",
        )
        self._pool.open(wait=False)
        #: The (quoted) schema of the ``vector`` extension when this store keeps its vectors
        #: in a pgvector column too, else ``None``.
        self._vector_schema = self._pgvector_schema()
        #: Whether fact vectors are also kept in a pgvector ``vector`` column (with an HNSW
        #: index per dimension), so that :meth:`nearest_facts` searches on the server.
        self.pgvector = self._vector_schema is not None
        self._hnsw_dims: set[int] = set()

    def _read_identity(self, conn: psycopg.Connection) -> str:
        """What this database is, whatever URL reached it: the cluster's system identifier
        (else the server's address), the database and the schema."""
        row = conn.execute("SELECT current_database(), current_schema()").fetchone()
        database, schema = (row[0], row[1]) if row else ("", "")
        #: The channel this store's changes are notified on (one per schema).
        self.channel = channel_name(self.schema or schema or "public")
        try:
            found = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
            cluster = f"system {found[0]}" if found else None
        except psycopg.Error:  # not allowed on some managed servers
            cluster = None
        if cluster is None:
            cluster = f"server {conn.info.host}:{conn.info.port}"
        return f"postgresql:{cluster}/{database}/{self.schema or schema}"

    def identity(self) -> str:
        """The cluster's system identifier, the database and the schema (see
        :meth:`memtap.sdk.storage.Store.identity`): the same for every URL reaching them."""
        return self._identity

    def watch_changes(self, fn: ChangeCallback) -> None:
        """Call ``fn(change)`` for every change another store object (another process)
        writes to this schema, within milliseconds of its commit, and with
        :data:`memtap.sdk.storage.EVERYTHING` each time the feed (re)connects (see
        :mod:`memtap.storage.changes`). The first call starts the listener: one connection and
        one thread."""
        with self._close_lock:
            self._check()
            self._changes.watch(fn)
            if self.feed is None:
                self.feed = ChangeListener(
                    self._conninfo,
                    self._connect_kwargs,
                    channel=self.channel,
                    origin=self._origin,
                    watchers=self._changes,
                )
                self.feed.start()

    def _notify(self, conn: psycopg.Connection, changes: Sequence[StoreChange]) -> None:
        """Tell the other processes about ``changes`` when ``conn``'s transaction commits."""
        if changes:
            notify(conn, self.channel, self._origin, changes)

    def _check_connection(self, conn: psycopg.Connection) -> None:
        with self._watchdog.watch(conn, self.settings.connect_timeout, "checking a pooled connection"):
            psycopg_pool.ConnectionPool.check_connection(conn)

    def _pgvector_schema(self) -> str | None:
        rows = self._read(
            "inspecting the schema",
            "SELECT quote_ident(n.nspname) FROM information_schema.columns c, pg_extension e"
            " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
            " AND c.table_schema = current_schema() AND c.table_name = 'fact_embeddings'"
            " AND c.column_name = 'vec'",
        )
        return str(rows[0][0]) if rows else None

    def __repr__(self) -> str:
        return f"PostgresStore({self._safe_url!r})"

    # -- plumbing ------------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"store {self._safe_url} is closed; open a new store (or memtap.Memory)")

    @contextlib.contextmanager
    def _connection(self, action: str) -> Iterator[psycopg.Connection]:
        self._check()
        try:
            with (
                self._pool.connection() as conn,
                self._watchdog.watch(conn, self.settings.watchdog_limit, action),
            ):
                yield conn
        except (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded) as e:
            # SQLSTATE classes 22, 23 and 54: the records' fault (a value out of range or
            # too large, a constraint), not the server's; the capture writer isolates it.
            self._check()
            raise store_error(self.url, action, e, refused=True) from e
        except (psycopg.Error, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed) as e:
            self._check()  # a call cut off by close() reports the closed store
            raise store_error(self.url, action, e) from e

    def _read(self, action: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query and fetch every row (retried once on a broken connection)."""
        for attempt in (1, 2):
            try:
                with self._connection(action) as conn:
                    return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
            except StoreError as e:
                if attempt == 2 or not isinstance(e.__cause__, psycopg.OperationalError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _write(self, action: str, work: Any) -> Any:
        """Run ``work(conn)`` in one transaction, retried on deadlocks, serialization
        failures and (once) a broken connection."""
        delay = 0.01
        for attempt in range(1, _WRITE_ATTEMPTS + 1):
            try:
                with self._connection(action) as conn, conn.transaction():
                    return work(conn)
            except StoreError as e:
                cause = e.__cause__
                code = getattr(cause, "sqlstate", None)
                # A broken pooled connection is replaced by the pool; writes are idempotent,
                # so one more try is safe even if the lost transaction had committed.
                broken = attempt == 1 and isinstance(cause, psycopg.OperationalError)
                if attempt == _WRITE_ATTEMPTS or not (code in RETRYABLE or broken):
                    raise
                log.debug("retrying %s after %s", action, code)
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    # -- writes --------------------------------------------------------------------------

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """Store exchanges, their messages and sessions in one transaction, skipping ids
        already stored (and repeats within the batch: the first one wins)."""
        batch = R.unique(exchanges)
        self._check()
        if not batch:
            return
        try:
            ex_columns = R.columns(R.exchange_rows(batch), 21)
        except (TypeError, ValueError) as e:  # a value JSON cannot hold: the records' fault
            raise store_error(self.url, "writing exchanges", e, refused=True) from e

        def work(conn: psycopg.Connection) -> None:
            inserted = conn.execute(_INSERT_EXCHANGES, ex_columns).fetchall()
            if not inserted:
                return
            seqs = {id_: int(seq) for id_, seq in inserted}
            fresh = [ex for ex in batch if ex.id in seqs]
            message_rows = R.message_rows(fresh, seqs)
            if message_rows:
                conn.execute(_INSERT_MESSAGES, R.columns(message_rows, 11))
            conn.execute(_UPSERT_SESSIONS, R.columns(R.session_rows(fresh), 5))
            self._notify(
                conn,
                [
                    StoreChange(entity_id=ex.attribution.entity_id, session_id=ex.attribution.session_id)
                    for ex in fresh
                ],
            )

        self._write("writing exchanges", work)

    def add_facts(self, facts: Sequence[Fact]) -> None:
        """Store facts, skipping known ids; a new fact that ``supersedes`` a stored fact of
        the same entity sets that fact's ``superseded_by`` (once: the first claim wins)."""
        batch = R.unique(facts)
        self._check()
        if not batch:
            return
        try:
            fact_columns = R.columns(R.fact_rows(batch), 10)
        except (TypeError, ValueError) as e:  # a value JSON cannot hold: the records' fault
            raise store_error(self.url, "adding facts", e, refused=True) from e

        def work(conn: psycopg.Connection) -> None:
            inserted = {id_ for (id_,) in conn.execute(_INSERT_FACTS, fact_columns).fetchall()}
            claims: dict[str, Fact] = {}
            for f in batch:
                if f.id in inserted and f.supersedes:
                    claims.setdefault(f.supersedes, f)
            if claims:
                conn.execute(
                    _MARK_SUPERSEDED,
                    [list(claims), [f.id for f in claims.values()],
                     [f.entity_id for f in claims.values()]],
                )  # fmt: skip
            self._notify(
                conn,
                [
                    StoreChange(entity_id=f.entity_id, facts=True, fact_ids=(f.id,))
                    for f in batch
                    if f.id in inserted
                ],
            )

        self._write("adding facts", work)

    def update_fact_context(self, facts: Sequence[Fact]) -> list[str]:
        """Give stored facts the context of these (matched by id, entity and source
        exchange: see :meth:`memtap.sdk.storage.Store.update_fact_context`); return the ids updated.
        The other processes are told as of facts added: they read them again by id."""
        wanted = {f.id: f for f in facts}  # the last context given for an id wins
        self._check()
        if not wanted:
            return []
        select = f"SELECT {R.FACT_SELECT} FROM facts WHERE id = ANY(%s) ORDER BY id FOR UPDATE"

        def work(conn: psycopg.Connection) -> list[str]:
            rows = conn.execute(select, [list(wanted)]).fetchall()  # type: ignore[arg-type]
            updated = [
                old.with_context_of(new)
                for old, new in ((R.fact(row), wanted[row[0]]) for row in rows)
                if (old.entity_id, old.source_exchange_id) == (new.entity_id, new.source_exchange_id)
            ]
            if not updated:
                return []
            conn.execute(
                "UPDATE facts SET metadata = u.metadata"
                " FROM unnest(%s::text[], %s::jsonb[]) AS u(id, metadata) WHERE facts.id = u.id",
                [[f.id for f in updated], [R.dump(f.metadata) for f in updated]],
            )
            self._notify(
                conn, [StoreChange(entity_id=f.entity_id, facts=True, fact_ids=(f.id,)) for f in updated]
            )
            return [f.id for f in updated]

        result: list[str] = self._write("updating fact contexts", work)
        return result

    def set_embeddings(self, embeddings: Mapping[str, Sequence[float]], *, model: str) -> None:
        """Attach vectors to stored facts by id (replacing earlier ones), recording the
        embedder ``model``; unknown ids are ignored. Vectors are kept as ``REAL[]`` and,
        when the server has pgvector, in a ``vector`` column as well (the first vectors of
        a new dimension create its HNSW index)."""
        self._check()
        ids: list[str] = []
        texts: list[str] = []
        dims: set[int] = set()
        for fact_id, vector in embeddings.items():
            values = [float(x) for x in vector]
            ids.append(fact_id)
            # One array literal per vector, parsed by the server: one statement for the
            # batch (a statement per vector costs a round trip each).
            texts.append("{" + ",".join(map(repr, values)) + "}")
            dims.add(len(values))
        if not ids:
            return
        vec_col, vec_val, vec_set = ("", "", "")
        if self._vector_schema is not None:
            vec_col, vec_set = ", vec", ", vec = excluded.vec"
            vec_val = f", u.v::{self._vector_schema}.vector"
        sql = f"""
            INSERT INTO fact_embeddings (fact_id, entity_id, model, dim, vector{vec_col})
            SELECT f.id, f.entity_id, %s, cardinality(u.v), u.v{vec_val}
            FROM (SELECT id, v::real[] AS v FROM unnest(%s::text[], %s::text[]) AS t(id, v)) u
            JOIN facts f ON f.id = u.id
            ON CONFLICT (fact_id) DO UPDATE SET model = excluded.model, dim = excluded.dim,
                vector = excluded.vector{vec_set}
        """

        def work(conn: psycopg.Connection) -> None:
            conn.execute(sql, [model, ids, texts])  # type: ignore[arg-type]

        self._write("storing embeddings", work)
        if self._vector_schema is not None:
            for dim in dims - self._hnsw_dims:
                self._ensure_hnsw(dim)

    def _ensure_hnsw(self, dim: int) -> None:
        """Create the HNSW index (cosine distance) of the vectors of ``dim`` dimensions: an
        index over ``vec::vector(dim)`` for the rows of that ``dim`` (pgvector indexes only
        a column of one dimension; a store may hold vectors of several embedders)."""
        if dim <= 0:
            return
        vs = self._vector_schema
        sql = (
            f"CREATE INDEX IF NOT EXISTS fact_embeddings_vec_hnsw_{dim} ON fact_embeddings"
            f" USING hnsw ((vec::{vs}.vector({dim})) {vs}.vector_cosine_ops) WHERE dim = {dim}"
        )
        try:
            with self._connection("creating a vector index") as conn:
                conn.execute(sql)  # type: ignore[arg-type]  # our own SQL, dim an int
        except StoreError as e:
            # Two processes creating it at once: the loser finds the name taken.
            if not isinstance(e.__cause__, (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable)):
                log.warning("no HNSW index for %d-dimensional vectors: %s", dim, e)
                return
        self._hnsw_dims.add(dim)

    def _nearest_query(
        self, *, entity_id: str, vector: Sequence[float], k: int, model: str
    ) -> tuple[str, list[Any]]:
        """The SQL and parameters of :meth:`nearest_facts` (ordered by the indexed
        expression, so that the planner can walk the HNSW index)."""
        vs, dim = self._vector_schema, len(vector)
        select = ", ".join(f"f.{c.strip()}" for c in R.FACT_SELECT.split(","))
        distance = f"e.vec::{vs}.vector({dim}) OPERATOR({vs}.<=>) %s::real[]::{vs}.vector({dim})"
        sql = (
            f"SELECT {select}, 1 - ({distance}) FROM fact_embeddings e JOIN facts f ON f.id = e.fact_id"
            f" WHERE e.dim = {dim} AND e.entity_id = %s AND e.model = %s AND f.entity_id = e.entity_id"
            f" AND f.superseded_by IS NULL ORDER BY {distance} LIMIT %s"
        )
        q = [float(x) for x in vector]
        return sql, [q, entity_id, model, q, max(int(k), 0)]

    def nearest_facts(
        self, *, entity_id: str, vector: Sequence[float], k: int, model: str
    ) -> list[tuple[Fact, float]]:
        """The entity's ``k`` current facts whose vectors (made by ``model``) are nearest to
        ``vector``, best first, each with its cosine similarity: searched on the server with
        the HNSW index (pgvector's iterative scan keeps finding rows when the entity's are
        few among many), so an entity too large to hold in memory can still be searched.
        Raises :class:`NotImplementedError` when the store has no pgvector column
        (:attr:`pgvector` is false)."""
        if self._vector_schema is None:
            self._check()
            raise NotImplementedError(
                "this PostgreSQL store has no pgvector column (no `vector` on the server)"
            )
        if k <= 0 or not vector:
            self._check()
            return []
        sql, params = self._nearest_query(entity_id=entity_id, vector=vector, k=k, model=model)
        with self._connection("searching vectors") as conn, conn.transaction():
            conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
            found = conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
        return [(R.fact(row[:-1]), float(row[-1])) for row in found]

    def indexable_facts(
        self, *, entity_id: str, model: str | None = None
    ) -> list[tuple[Fact, Sequence[float] | None]]:
        """The entity's current facts, oldest first, each with its vector when one made by
        ``model`` is stored (one query)."""
        select = ", ".join(f"f.{c.strip()}" for c in R.FACT_SELECT.split(","))
        sql = (
            f"SELECT {select}, e.vector FROM facts f"
            " LEFT JOIN fact_embeddings e ON e.fact_id = f.id AND e.model = %s"
            " WHERE f.entity_id = %s AND f.superseded_by IS NULL ORDER BY f.created_at, f.seq"
        )
        found = self._read("loading facts for recall", sql, [model, entity_id])
        return [(R.fact(row[:-1]), row[-1]) for row in found]

    def indexable_facts_by_id(
        self, *, entity_id: str, ids: Sequence[str], model: str | None = None
    ) -> list[tuple[Fact, Sequence[float] | None]]:
        """:meth:`indexable_facts` for the facts ``ids`` only (what another process has just
        added: see :mod:`memtap_postgres.feed`)."""
        select = ", ".join(f"f.{c.strip()}" for c in R.FACT_SELECT.split(","))
        sql = (
            f"SELECT {select}, e.vector FROM facts f"
            " LEFT JOIN fact_embeddings e ON e.fact_id = f.id AND e.model = %s"
            " WHERE f.entity_id = %s AND f.id = ANY(%s) AND f.superseded_by IS NULL"
            " ORDER BY f.created_at, f.seq"
        )
        found = self._read("loading new facts for recall", sql, [model, entity_id, list(ids)])
        return [(R.fact(row[:-1]), row[-1]) for row in found]

    def forget(self, *, entity_id: str) -> int:
        """Delete the entity's sessions, exchanges, messages and facts; return the number of
        exchanges plus facts deleted."""

        def work(conn: psycopg.Connection) -> int:
            counted = 0
            for table in ("messages", "exchanges", "sessions", "facts", "fact_embeddings"):
                cur = conn.execute(f"DELETE FROM {table} WHERE entity_id = %s", [entity_id])  # type: ignore[arg-type]
                if table in ("exchanges", "facts"):
                    counted += max(cur.rowcount, 0)
            self._notify(conn, [StoreChange(entity_id=entity_id, forgotten=True)])
            return counted

        result: int = self._write("forgetting an entity", work)
        return result

    def forget_facts(self, *, entity_id: str, fact_ids: Sequence[str]) -> int:
        """Delete these facts of the entity and their vectors; return how many facts (the
        other processes reload the entity's facts)."""
        ids = list(dict.fromkeys(fact_ids))

        def work(conn: psycopg.Connection) -> int:
            conn.execute(
                "DELETE FROM fact_embeddings WHERE entity_id = %s AND fact_id = ANY(%s)", [entity_id, ids]
            )
            cur = conn.execute("DELETE FROM facts WHERE entity_id = %s AND id = ANY(%s)", [entity_id, ids])
            deleted = max(cur.rowcount, 0)
            if deleted:
                self._notify(conn, [StoreChange(entity_id=entity_id, facts=True)])
            return deleted

        if not ids:
            self._check()
            return 0
        result: int = self._write("forgetting facts", work)
        return result

    # -- reads ---------------------------------------------------------------------------

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """The session's messages, oldest first (by exchange start, then write order and
        position); with ``limit`` only the latest ``limit``; with ``entity_id`` only that
        entity's."""
        if limit is not None and limit <= 0:
            self._check()
            return []
        sql = f"SELECT {R.MESSAGE_SELECT} FROM messages m WHERE m.session_id = %s"
        params: list[Any] = [session_id]
        if entity_id is not None:
            sql += " AND m.entity_id = %s"
            params.append(entity_id)
        order = ("m.created_at", "m.exchange_seq", "m.exchange_id", "m.position")
        if limit is None:
            sql += f" ORDER BY {', '.join(order)}"
        else:
            sql += f" ORDER BY {' DESC, '.join(order)} DESC LIMIT %s"
            params.append(limit)
        rows = self._read("reading history", sql, params)
        if limit is not None:
            rows.reverse()
        return [R.message(row, stamped=True) for row in rows]

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """Sessions with their exchange counts, most recently active first."""
        where = "" if entity_id is None else "WHERE entity_id = %(entity)s"
        sql = f"""
            SELECT s.session_id, s.entity_id, s.process_id, s.created_at, s.updated_at,
                   coalesce(c.n, 0)
            FROM (SELECT * FROM sessions {where}) s
            LEFT JOIN (SELECT entity_id, session_id, count(*) AS n FROM exchanges {where}
                       GROUP BY entity_id, session_id) c
              ON c.entity_id = s.entity_id AND c.session_id = s.session_id
            ORDER BY s.updated_at DESC, s.entity_id, s.session_id
            LIMIT %(n)s
        """
        params = {"n": max(limit, 0), "entity": entity_id}
        found = self._read("listing sessions", sql, params)  # type: ignore[arg-type]
        return [
            SessionInfo(
                session_id=session, entity_id=entity, process_id=process,
                created_at=R.utc(created), updated_at=R.utc(updated), exchange_count=int(count),
            )
            for session, entity, process, created, updated, count in found
        ]  # fmt: skip

    def exchanges(self, *, entity_id: str | None = None, session_id: str | None = None) -> Iterator[Exchange]:
        """Stored exchanges with their messages, oldest first, read in pages (keyset
        pagination: no connection or transaction is held between pages)."""
        conditions: list[str] = []
        params: list[Any] = []
        if entity_id is not None:
            conditions.append("e.entity_id = %s")
            params.append(entity_id)
        if session_id is not None:
            conditions.append("e.session_id = %s")
            params.append(session_id)
        after: tuple[Any, int] | None = None
        while True:
            where = list(conditions)
            page_params = list(params)
            if after is not None:
                where.append("(e.started_at, e.seq) > (%s, %s)")
                page_params.extend(after)
            sql = (
                f"SELECT {R.EXCHANGE_SELECT}, e.seq FROM exchanges e"
                f"{' WHERE ' + ' AND '.join(where) if where else ''}"
                f" ORDER BY e.started_at, e.seq LIMIT {_PAGE}"
            )
            page = self._read("exporting exchanges", sql, page_params)
            if not page:
                return
            ids = [row[0] for row in page]
            found: dict[str, list[Message]] = {id_: [] for id_ in ids}
            for row in self._read(
                "exporting exchanges",
                f"SELECT m.exchange_id, {R.MESSAGE_SELECT} FROM messages m"
                " WHERE m.exchange_id = ANY(%s) ORDER BY m.exchange_id, m.position",
                [ids],
            ):
                found[row[0]].append(R.message(row[1:], stamped=False))
            for row in page:
                yield R.exchange(row[:-1], found[row[0]])
            if len(page) < _PAGE:
                return
            after = (page[-1][17], page[-1][-1])

    def exchange(self, exchange_id: str) -> Exchange | None:
        """The stored exchange with this id (with its messages and injected blocks), or ``None``."""
        rows = self._read(
            "reading an exchange",
            f"SELECT {R.EXCHANGE_SELECT} FROM exchanges e WHERE e.id = %s",
            [exchange_id],
        )
        if not rows:
            return None
        messages = [
            R.message(row, stamped=False)
            for row in self._read(
                "reading an exchange",
                f"SELECT {R.MESSAGE_SELECT} FROM messages m WHERE m.exchange_id = %s ORDER BY m.position",
                [exchange_id],
            )
        ]
        return R.exchange(rows[0], messages)

    def facts(
        self,
        *,
        entity_id: str,
        process_id: str | None = None,
        include_superseded: bool = False,
    ) -> list[Fact]:
        """The entity's facts, newest first (by ``created_at``, then latest written)."""
        sql = f"SELECT {R.FACT_SELECT} FROM facts WHERE entity_id = %s"
        params: list[Any] = [entity_id]
        if process_id is not None:
            sql += " AND process_id = %s"
            params.append(process_id)
        if not include_superseded:
            sql += " AND superseded_by IS NULL"
        sql += " ORDER BY created_at DESC, seq DESC"
        return [R.fact(row) for row in self._read("reading facts", sql, params)]

    def entities(self) -> list[str]:
        """Every entity with a session or a fact, sorted (used by ``memtap export``)."""
        sql = "SELECT entity_id FROM sessions UNION SELECT entity_id FROM facts ORDER BY 1"
        return [entity for (entity,) in self._read("listing entities", sql)]

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """Every stored ``(entity_id, session_id)``, read in pages (keyset pagination)."""
        after: tuple[str, str] | None = None
        while True:
            if after is None:
                page = self._read(
                    "listing sessions",
                    f"SELECT entity_id, session_id FROM sessions ORDER BY 1, 2 LIMIT {_KEYS_PAGE}",
                )
            else:
                page = self._read(
                    "listing sessions",
                    "SELECT entity_id, session_id FROM sessions WHERE (entity_id, session_id) > (%s, %s)"
                    f" ORDER BY 1, 2 LIMIT {_KEYS_PAGE}",
                    after,
                )
            yield from ((entity, session) for entity, session in page)
            if len(page) < _KEYS_PAGE:
                return
            after = (page[-1][0], page[-1][1])

    def stats(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``exchanges``, ``messages``, ``facts``."""
        names = ("sessions", "exchanges", "messages", "facts")
        sql = "SELECT " + ", ".join(f"(SELECT count(*) FROM {name})" for name in names)
        (row,) = self._read("counting rows", sql)
        return dict(zip(names, (int(n) for n in row)))

    def close(self) -> None:
        """Close the pool (idempotent). Further calls raise :class:`StoreError`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self.feed is not None:
            self.feed.close()
        with contextlib.suppress(Exception):
            self._pool.close(timeout=5.0)
        self._watchdog.close()
