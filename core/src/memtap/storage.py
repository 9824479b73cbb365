"""The storage contract every backend implements, and the built-in in-memory backend.

A backend is found for a store URL through the ``memtap_open_store`` hook: the DuckDB plugin
answers ``duckdb:///path``, the PostgreSQL plugin ``postgresql://...``, and core itself
answers ``memory://`` with :class:`InMemoryStore` (a reference implementation, handy for
tests and for plugin authors; nothing survives the process).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .model import Exchange, Fact, Message, SessionInfo


class StoreError(Exception):
    """A storage backend failed; the message says what to do about it."""


class UnknownStoreURLError(ValueError):
    """No installed storage plugin understands a store URL."""


@runtime_checkable
class Store(Protocol):
    """What memtap needs from a storage backend.

    Implementations must be safe to call from several threads at once. Writes are
    idempotent: writing an exchange (or fact) whose id is already stored changes nothing,
    so a retried batch never duplicates.
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

    def forget(self, *, entity_id: str) -> int:
        """Delete everything stored for an entity; return how many records were deleted."""

    def stats(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``exchanges``, ``messages``, ``facts``."""

    def close(self) -> None:
        """Release connections and files. Further calls raise :class:`StoreError`."""


def exchange_messages(exchange: Exchange) -> list[Message]:
    """The messages an exchange adds to its session's history, in order, stamped with the
    exchange id and time (what every backend stores in its messages table)."""
    return [
        attrs.evolve(m, exchange_id=exchange.id, created_at=exchange.started_at) for m in exchange.messages
    ]


@attrs.define
class _Row:
    exchange: Exchange
    messages: list[Message]


class InMemoryStore:
    """A store that lives in process memory (URL ``memory://``). Thread-safe."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._facts: dict[str, Fact] = {}
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.url} is closed; open a new memtap.Memory")

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """See :meth:`Store.write_exchanges`."""
        with self._lock:
            self._check()
            for ex in exchanges:
                if ex.id not in self._rows:
                    self._rows[ex.id] = _Row(ex, exchange_messages(ex))

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
        return len(ex_ids) + len(fact_ids)

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

    def close(self) -> None:
        """See :meth:`Store.close`."""
        self._closed = True
