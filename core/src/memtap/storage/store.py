"""The storage contract every backend implements, and the built-in in-memory backend.

A backend is found for a store URL through the ``memtap_open_store`` hook: the DuckDB plugin
answers ``duckdb:///path``, the PostgreSQL plugin ``postgresql://...``, and core itself
answers ``memory://`` with :class:`InMemoryStore` (a reference implementation, handy for
tests and for plugin authors; nothing survives the process).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

# The errors a backend raises, defined with memtap's others (re-exported: backends import them here).
from memtap.errors import StoreError as StoreError
from memtap.errors import UnknownStoreURLError as UnknownStoreURLError
from memtap.protocol.model import Exchange, Fact, Message, SessionInfo
from memtap.protocol.secret_names import redact_url

logger = logging.getLogger(__name__)


class StoreNotFoundError(StoreError):
    """A store that was to be read does not exist (opening it would create an empty one)."""


DUCKDB_SCHEME = "duckdb"
_DUCKDB_MEMORY = ":memory:"
_DUCKDB_FORMS = "duckdb:///relative/path.duckdb, duckdb:////absolute/path.duckdb or duckdb:///:memory:"


def duckdb_path(url: str) -> str | None:
    """The database path a ``duckdb:`` URL names (``":memory:"`` for an in-memory store), or
    ``None`` when the URL has another scheme. Raises :class:`StoreError` for a malformed
    ``duckdb:`` URL. (Core's default store is a DuckDB file, so core knows its URLs.)"""
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() != DUCKDB_SCHEME:
        return None
    if not rest.startswith("///") or len(rest) == 3:
        raise StoreError(f"bad DuckDB store URL {url!r}: write {_DUCKDB_FORMS}")
    path = rest[3:]
    return path if path == _DUCKDB_MEMORY else os.path.expanduser(path)


def as_store_url(value: str) -> str:
    """``value`` as a store URL: a plain path to a ``.duckdb`` file (no ``scheme:``)
    becomes ``duckdb:///`` and its absolute path; any other value is returned as is."""
    if value.endswith(".duckdb") and not _SCHEME.match(value):
        return f"{DUCKDB_SCHEME}:///{os.path.abspath(os.path.expanduser(value))}"
    return value


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def require_existing_store(url: str) -> None:
    """Raise :class:`StoreNotFoundError` when ``url`` names a store file that does not exist
    (a DuckDB path), so that a reader never creates an empty store by opening a mistyped
    path. Other URLs pass: a server database or an in-memory store has no file to check.
    Raises :class:`StoreError` for a malformed ``duckdb:`` URL."""
    path = duckdb_path(url)
    if path is not None and path != _DUCKDB_MEMORY and not os.path.isfile(path):
        raise StoreNotFoundError(f"no memtap store at {path}; run your app or `memtap demo` first")


@runtime_checkable
class Store(Protocol):
    """What memtap needs from a storage backend.

    Implementations must be safe to call from several threads at once. Writes are
    idempotent: writing an exchange (or fact) whose id is already stored changes nothing,
    so a retried batch never duplicates.

    A store no other process can write to while this one has it open (DuckDB locks its
    file; the in-memory store lives in the process) may offer the optional method
    ``watch_sessions(fn)``: it promises to call ``fn(entity_id, session_id)`` for every
    exchange written through it, by whatever code (:class:`SessionWatchers` does the
    bookkeeping). memtap then knows every session the store has, and a session outside
    them costs no read at all, not even in the background.

    A store several processes share may offer the optional method ``watch_changes(fn)``
    (a change feed, :mod:`memtap.storage.changes`): it promises to call ``fn(change)`` with a
    :class:`memtap.storage.changes.StoreChange` for every change (facts added, an exchange written,
    an entity forgotten) written through another store object on the same data, soon after
    it is committed, and with :data:`memtap.storage.changes.EVERYTHING` whenever it may have missed
    some (:class:`memtap.storage.changes.ChangeWatchers` does the bookkeeping). memtap's caches
    (recall indexes, session histories) then follow other processes' writes within the
    feed's delay instead of at their periodic refresh. DuckDB (one process holds the file)
    and the in-memory store (one process) have nothing to report. A feed that names the
    facts added (``StoreChange.fact_ids``) goes with the optional method
    ``indexable_facts_by_id(*, entity_id, ids, model)`` (the rows of
    :meth:`indexable_facts` for those ids only): a cached entity then takes in another
    process's new facts instead of reloading all of its own.

    A store whose text cannot hold some characters (PostgreSQL: NUL) names them in the
    optional attribute ``unstorable_characters`` (a string); memtap replaces them, and lone
    surrogates, with U+FFFD before writing (:mod:`memtap.storage.storable`). A write the
    store refuses for what a record holds raises :class:`memtap.errors.RecordRefusedError`:
    the capture writer then isolates that record and quarantines it, where any other
    error is taken for a store that is unavailable (the batch is retried).
    """

    url: str

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """Store exchanges (their sessions and messages) atomically, skipping known ids."""

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """The session's messages, oldest first; with ``limit``, only the latest ``limit``.

        With ``entity_id``, only that entity's messages in the session.
        """

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """Sessions, most recently active first."""

    def exchanges(self, *, entity_id: str | None = None, session_id: str | None = None) -> Iterator[Exchange]:
        """Stored exchanges, oldest first (used by export)."""

    def exchange(self, exchange_id: str) -> Exchange | None:
        """The stored exchange with this id (its messages and its ``injected`` blocks), or
        ``None``. One indexed read: what ``memtap explain`` and the UI's page of a call use.

        Optional: without it memtap finds the exchange by going through :meth:`exchanges`.
        """

    def entities(self) -> list[str]:
        """Every entity with stored data (a session, an exchange or a fact, current or
        superseded), sorted (used by export: facts of an entity without sessions too)."""

    def add_facts(self, facts: Sequence[Fact]) -> None:
        """Store facts, skipping known ids; a fact that ``supersedes`` another marks it."""

    def facts(
        self,
        *,
        entity_id: str,
        process_id: str | None = None,
        include_superseded: bool = False,
    ) -> list[Fact]:
        """An entity's facts, newest first."""

    def update_fact_context(self, facts: Sequence[Fact]) -> list[str]:
        """Give stored facts the context these facts have (``metadata["context"]``: the
        turns around an episode, when the turns after it arrive); return the ids of the
        facts updated. A stored fact is updated when its id, entity and
        ``source_exchange_id`` are a given fact's (an identical turn of another exchange is
        the same episode and keeps the context it was first said with); only its context
        changes (an empty one removes the key), and unknown ids are ignored. A store with a
        change feed reports the facts updated as facts added (``StoreChange.fact_ids``):
        another process's cache reads them again.

        Optional: without it, a fact keeps the context it was first stored with.
        """

    def set_embeddings(self, embeddings: Mapping[str, Sequence[float]], *, model: str) -> None:
        """Attach embedding vectors to stored facts, by fact id, recording the ``model``
        (embedder name) that made them; a fact's earlier vector is replaced, unknown ids
        are ignored. Called from memtap's background embedding worker.

        Recall needs this and :meth:`indexable_facts`; a store without them still works
        (vectors are then recomputed after every restart and kept in memory only).
        """

    def indexable_facts(
        self, *, entity_id: str, model: str | None = None
    ) -> list[tuple[Fact, Sequence[float] | None]]:
        """An entity's current (not superseded) facts, oldest first, each with its vector
        if one made by ``model`` is stored (else ``None``; always ``None`` without a model).
        Vectors may be any float sequence (a list, a numpy array). This is what memtap's
        in-process recall index loads once per entity, so it should be one query.
        """

    def forget(self, *, entity_id: str) -> int:
        """Delete everything stored for an entity; return how many records were deleted."""

    def forget_facts(self, *, entity_id: str, fact_ids: Sequence[str]) -> int:
        """Delete these facts of the entity (and their vectors); ids of other entities'
        facts and unknown ids are ignored. Return how many facts were deleted.

        Optional: without it, :meth:`memtap.Memory.forget` cannot forget one fact (an
        entity can still be forgotten whole).
        """

    def stats(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``exchanges``, ``messages``, ``facts``."""

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """Every stored session as ``(entity_id, session_id)``, in any order (streamed: a
        large store need not hold them all at once).

        memtap reads this once per process, in the background, to know which sessions are
        new: a new session's first call then costs no store read on the request path.
        Optional: without it, each session's first call waits (a bounded time) for its read.
        """

    def identity(self) -> str | None:
        """What the store *is*, independently of the URL that reached it: the same string
        for every URL naming the same data (another password, host alias or scheme), and
        ``None`` for a store that keeps nothing across processes. The durability spool is
        keyed by it, so that calls one process could not store are replayed by the next
        process on the same data, whatever URL that one was given.

        Must be cheap (no I/O: work it out when the store is opened) and hold no secret.
        Optional: without it, the URL without its password is used (:func:`store_identity`).
        """

    def close(self) -> None:
        """Release connections and files. Further calls raise :class:`StoreError`."""


def url_without_password(url: str) -> str:
    """``url`` without the password of its user-info part or a ``password=`` query
    parameter (what identifies a store whose backend cannot say better)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"])
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def store_identity(store: Store) -> str | None:
    """The store's :meth:`Store.identity`, else its URL without the password (``None`` for
    an in-memory URL)."""
    identity = getattr(store, "identity", None)
    if callable(identity):
        found: str | None = identity()
        return found
    url = store.url
    if url.startswith("memory:") or url.endswith(":memory:"):
        return None
    return url_without_password(url)


def exchange_messages(exchange: Exchange) -> list[Message]:
    """The messages an exchange adds to its session's history, in order, stamped with the
    exchange id and time (what every backend stores in its messages table).

    Made for every call, twice (its session's history, the store's rows): each message is
    built directly, a third of what ``attrs.evolve`` costs (which looks the class's fields
    up each time); a test checks that every field of :class:`Message` is carried over."""
    eid, at = exchange.id, exchange.started_at
    return [
        Message(m.role, m.content, m.tool_calls, m.tool_call_id, m.name, eid, at) for m in exchange.messages
    ]


@attrs.define
class _Row:
    exchange: Exchange
    messages: list[Message]


class SessionWatchers:
    """The callbacks a store offering ``watch_sessions`` calls for each exchange it writes
    (see :class:`Store`)."""

    def __init__(self) -> None:
        self._watchers: list[Callable[[str, str], None]] = []

    def watch(self, fn: Callable[[str, str], None]) -> None:
        """Call ``fn(entity_id, session_id)`` for every exchange written from now on."""
        self._watchers.append(fn)

    def wrote(self, exchanges: Iterable[Exchange]) -> None:
        """Tell the watchers about written exchanges (a watcher's error is logged, never
        raised into the write)."""
        for fn in self._watchers:
            for ex in exchanges:
                try:
                    fn(ex.attribution.entity_id, ex.attribution.session_id)
                except Exception:
                    logger.exception("memtap: a session watcher failed")


class InMemoryStore:
    """A store that lives in process memory (URL ``memory://``). Thread-safe."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._watchers = SessionWatchers()
        #: Nothing outside this process writes to it (see :class:`Store`).
        self.watch_sessions = self._watchers.watch
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._facts: dict[str, Fact] = {}
        self._vectors: dict[str, tuple[str, tuple[float, ...]]] = {}
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"store {redact_url(self.url)} is closed; open a new memtap.Memory")

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """See :meth:`Store.write_exchanges`."""
        with self._lock:
            self._check()
            for ex in exchanges:
                if ex.id not in self._rows:
                    self._rows[ex.id] = _Row(ex, exchange_messages(ex))
        self._watchers.wrote(exchanges)

    def _ordered(self) -> list[_Row]:
        return sorted(self._rows.values(), key=lambda r: r.exchange.started_at)

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """See :meth:`Store.history`."""
        with self._lock:
            self._check()
            out = [
                m
                for r in self._ordered()
                if r.exchange.attribution.session_id == session_id
                and (entity_id is None or r.exchange.attribution.entity_id == entity_id)
                for m in r.messages
            ]
        if limit is None:
            return out
        return out[-limit:] if limit > 0 else []

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """See :meth:`Store.sessions`."""
        with self._lock:
            self._check()
            found: dict[tuple[str, str], SessionInfo] = {}
            for r in self._ordered():
                a = r.exchange.attribution
                if entity_id is not None and a.entity_id != entity_id:
                    continue
                key = (a.entity_id, a.session_id)
                prev = found.get(key)
                found[key] = SessionInfo(
                    session_id=a.session_id,
                    entity_id=a.entity_id,
                    process_id=a.process_id if prev is None else prev.process_id,
                    created_at=r.exchange.started_at if prev is None else prev.created_at,
                    updated_at=r.exchange.started_at,
                    exchange_count=1 if prev is None else prev.exchange_count + 1,
                )
        return sorted(found.values(), key=lambda s: s.updated_at, reverse=True)[:limit]

    def exchanges(self, *, entity_id: str | None = None, session_id: str | None = None) -> Iterator[Exchange]:
        """See :meth:`Store.exchanges`."""
        with self._lock:
            self._check()
            rows = self._ordered()
        for r in rows:
            a = r.exchange.attribution
            if entity_id is not None and a.entity_id != entity_id:
                continue
            if session_id is not None and a.session_id != session_id:
                continue
            yield r.exchange

    def exchange(self, exchange_id: str) -> Exchange | None:
        """See :meth:`Store.exchange`."""
        with self._lock:
            self._check()
            row = self._rows.get(exchange_id)
        return row.exchange if row is not None else None

    def entities(self) -> list[str]:
        """See :meth:`Store.entities`."""
        with self._lock:
            self._check()
            found = {r.exchange.attribution.entity_id for r in self._rows.values()}
            found |= {f.entity_id for f in self._facts.values()}
        return sorted(found)

    def add_facts(self, facts: Sequence[Fact]) -> None:
        """See :meth:`Store.add_facts`."""
        with self._lock:
            self._check()
            for f in facts:
                if f.id in self._facts:
                    continue
                self._facts[f.id] = f
                old = self._facts.get(f.supersedes) if f.supersedes else None
                if old is not None and old.superseded_by is None and old.entity_id == f.entity_id:
                    self._facts[old.id] = attrs.evolve(old, superseded_by=f.id)

    def facts(
        self,
        *,
        entity_id: str,
        process_id: str | None = None,
        include_superseded: bool = False,
    ) -> list[Fact]:
        """See :meth:`Store.facts`."""
        with self._lock:
            self._check()
            out = [
                f
                for f in self._facts.values()
                if f.entity_id == entity_id
                and (process_id is None or f.process_id == process_id)
                and (include_superseded or f.superseded_by is None)
            ]
        return sorted(out, key=lambda f: f.created_at, reverse=True)

    def update_fact_context(self, facts: Sequence[Fact]) -> list[str]:
        """See :meth:`Store.update_fact_context`."""
        updated: list[str] = []
        with self._lock:
            self._check()
            for f in facts:
                old = self._facts.get(f.id)
                if old is None or (old.entity_id, old.source_exchange_id) != (
                    f.entity_id,
                    f.source_exchange_id,
                ):
                    continue
                self._facts[f.id] = old.with_context_of(f)
                updated.append(f.id)
        return updated

    def set_embeddings(self, embeddings: Mapping[str, Sequence[float]], *, model: str) -> None:
        """See :meth:`Store.set_embeddings`."""
        with self._lock:
            self._check()
            for fact_id, vector in embeddings.items():
                if fact_id in self._facts:
                    self._vectors[fact_id] = (model, tuple(float(x) for x in vector))

    def indexable_facts(
        self, *, entity_id: str, model: str | None = None
    ) -> list[tuple[Fact, Sequence[float] | None]]:
        """See :meth:`Store.indexable_facts`."""
        with self._lock:
            self._check()
            out: list[tuple[Fact, Sequence[float] | None]] = []
            for f in self._facts.values():
                if f.entity_id != entity_id or f.superseded_by is not None:
                    continue
                stored = self._vectors.get(f.id)
                out.append((f, stored[1] if stored is not None and stored[0] == model else None))
        out.sort(key=lambda row: row[0].created_at)
        return out

    def forget(self, *, entity_id: str) -> int:
        """See :meth:`Store.forget`."""
        with self._lock:
            self._check()
            ex_ids = [k for k, r in self._rows.items() if r.exchange.attribution.entity_id == entity_id]
            fact_ids = [k for k, f in self._facts.items() if f.entity_id == entity_id]
            for k in ex_ids:
                del self._rows[k]
            for k in fact_ids:
                del self._facts[k]
                self._vectors.pop(k, None)
        return len(ex_ids) + len(fact_ids)

    def forget_facts(self, *, entity_id: str, fact_ids: Sequence[str]) -> int:
        """See :meth:`Store.forget_facts`."""
        with self._lock:
            self._check()
            doomed = [
                k
                for k in dict.fromkeys(fact_ids)
                if k in self._facts and self._facts[k].entity_id == entity_id
            ]
            for k in doomed:
                del self._facts[k]
                self._vectors.pop(k, None)
        return len(doomed)

    def stats(self) -> dict[str, int]:
        """See :meth:`Store.stats`."""
        with self._lock:
            self._check()
            sessions = {
                (r.exchange.attribution.entity_id, r.exchange.attribution.session_id)
                for r in self._rows.values()
            }
            return {
                "sessions": len(sessions),
                "exchanges": len(self._rows),
                "messages": sum(len(r.messages) for r in self._rows.values()),
                "facts": len(self._facts),
            }

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """See :meth:`Store.session_keys`."""
        with self._lock:
            self._check()
            keys = {
                (r.exchange.attribution.entity_id, r.exchange.attribution.session_id)
                for r in self._rows.values()
            }
        return iter(sorted(keys))

    def identity(self) -> str | None:
        """See :meth:`Store.identity` (``None``: nothing survives the process)."""
        return None

    def close(self) -> None:
        """See :meth:`Store.close`."""
        self._closed = True
