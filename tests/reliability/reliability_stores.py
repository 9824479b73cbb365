"""Fault-injecting wrappers around real stores (a store that goes down, one that is slow)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from memtap.protocol.model import Exchange, Fact, Message, SessionInfo
from memtap.storage.store import Store, StoreError


class FaultyStore:
    """Delegates to a real store; while ``down`` every call raises :class:`StoreError` (as a
    dead server does); ``delay`` seconds are slept before every call (a slow server)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.down = threading.Event()
        self.delay = 0.0
        self.write_attempts = 0
        self.written_ids: list[str] = []
        self._lock = threading.Lock()

    def _gate(self) -> None:
        if self.delay:
            time.sleep(self.delay)
        if self.down.is_set():
            raise StoreError(f"store {self.url} is down (injected fault)")

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        with self._lock:
            self.write_attempts += 1
        self._gate()
        self.inner.write_exchanges(exchanges)
        with self._lock:
            self.written_ids.extend(ex.id for ex in exchanges)

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        self._gate()
        return self.inner.history(session_id, entity_id=entity_id, limit=limit)

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        self._gate()
        return self.inner.sessions(entity_id=entity_id, limit=limit)

    def exchanges(self, *, entity_id: str | None = None, session_id: str | None = None) -> Iterator[Exchange]:
        self._gate()
        return self.inner.exchanges(entity_id=entity_id, session_id=session_id)

    def entities(self) -> list[str]:
        self._gate()
        return self.inner.entities()

    def add_facts(self, facts: Sequence[Fact]) -> None:
        self._gate()
        self.inner.add_facts(facts)

    def facts(
        self, *, entity_id: str, process_id: str | None = None, include_superseded: bool = False
    ) -> list[Fact]:
        self._gate()
        return self.inner.facts(
            entity_id=entity_id, process_id=process_id, include_superseded=include_superseded
        )

    def forget(self, *, entity_id: str) -> int:
        self._gate()
        return self.inner.forget(entity_id=entity_id)

    def stats(self) -> dict[str, int]:
        self._gate()
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # methods added to the protocol later
        return getattr(self.inner, name)
