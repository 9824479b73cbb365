"""A store another process holds, opened as soon as it frees.

A DuckDB file is open in one process at a time: while ``memtap ui``, a CLI command or
another worker holds it, an app's :class:`memtap.Memory` must still run (fail open). It
gets a :class:`WaitingStore`: every operation tries to open the real store again (at most
every :data:`RETRY_EVERY` seconds) and, until that succeeds, raises
:class:`~memtap.errors.StoreLockedError`. Captured calls are then journaled to the spool
(keyed by the held store's identity) and stored by the capture writer's retries once the
store frees; reads fail as they do in any store outage (the call goes without memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from memtap.errors import StoreError, StoreLockedError
from memtap.protocol.model import Exchange, Fact, Message, SessionInfo
from memtap.storage.store import Store

log = logging.getLogger("memtap")

#: Seconds between two attempts to open the held store.
RETRY_EVERY = 0.5


class WaitingStore:
    """A :class:`~memtap.storage.store.Store` standing for one another process holds:
    ``open_store()`` is tried again on use (at most every :data:`RETRY_EVERY` s) until it
    succeeds; meanwhile operations raise the :class:`StoreLockedError` it raised."""

    def __init__(self, url: str, open_store: Callable[[], Store], held: StoreLockedError) -> None:
        self.url = url
        self._open_store = open_store
        self._held = held
        self._store: Store | None = None
        self._closed = False
        self._next_try = time.monotonic() + RETRY_EVERY
        self._lock = threading.Lock()

    def _opened(self) -> Store:
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._closed:
                raise StoreError(f"store {self.url} is closed; open a new store (or memtap.Memory)")
            if self._store is not None:
                return self._store
            now = time.monotonic()
            if now < self._next_try:
                raise self._still_held()
            self._next_try = now + RETRY_EVERY
            try:
                self._store = self._open_store()
            except StoreLockedError:
                # A new, short error each time: the first one (logged once, by Memory) said
                # it all, and re-raising one object would chain every traceback onto it.
                raise self._still_held() from None
            log.warning("memtap: the store %s is free again; storing what was held back", self.url)
            return self._store

    def _still_held(self) -> StoreLockedError:
        return StoreLockedError(
            f"store {self.url} is held by another process; memtap opens it once it frees",
            identity=self._held.identity,
        )

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        """See :meth:`memtap.storage.store.Store.write_exchanges`."""
        self._opened().write_exchanges(exchanges)

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """See :meth:`memtap.storage.store.Store.history`."""
        return self._opened().history(session_id, entity_id=entity_id, limit=limit)

    def sessions(self, *, entity_id: str | None = None, limit: int = 100) -> list[SessionInfo]:
        """See :meth:`memtap.storage.store.Store.sessions`."""
        return self._opened().sessions(entity_id=entity_id, limit=limit)

    def exchanges(self, *, entity_id: str | None = None, session_id: str | None = None) -> Iterator[Exchange]:
        """See :meth:`memtap.storage.store.Store.exchanges`."""
        return self._opened().exchanges(entity_id=entity_id, session_id=session_id)

    def exchange(self, exchange_id: str) -> Exchange | None:
        """See :meth:`memtap.storage.store.Store.exchange`."""
        return self._opened().exchange(exchange_id)

    def entities(self) -> list[str]:
        """See :meth:`memtap.storage.store.Store.entities`."""
        return self._opened().entities()

    def add_facts(self, facts: Sequence[Fact]) -> None:
        """See :meth:`memtap.storage.store.Store.add_facts`."""
        self._opened().add_facts(facts)

    def facts(
        self, *, entity_id: str, process_id: str | None = None, include_superseded: bool = False
    ) -> list[Fact]:
        """See :meth:`memtap.storage.store.Store.facts`."""
        return self._opened().facts(
            entity_id=entity_id, process_id=process_id, include_superseded=include_superseded
        )

    def update_fact_context(self, facts: Sequence[Fact]) -> list[str]:
        """See :meth:`memtap.storage.store.Store.update_fact_context` (optional there: a
        store without it keeps the first context)."""
        update = getattr(self._opened(), "update_fact_context", None)
        return list(update(facts)) if update is not None else []

    def set_embeddings(self, embeddings: Mapping[str, Sequence[float]], *, model: str) -> None:
        """See :meth:`memtap.storage.store.Store.set_embeddings`."""
        self._opened().set_embeddings(embeddings, model=model)

    def indexable_facts(
        self, *, entity_id: str, model: str | None = None
    ) -> list[tuple[Fact, Sequence[float] | None]]:
        """See :meth:`memtap.storage.store.Store.indexable_facts`."""
        return self._opened().indexable_facts(entity_id=entity_id, model=model)

    def forget(self, *, entity_id: str) -> int:
        """See :meth:`memtap.storage.store.Store.forget`."""
        return self._opened().forget(entity_id=entity_id)

    def forget_facts(self, *, entity_id: str, fact_ids: Sequence[str]) -> int:
        """See :meth:`memtap.storage.store.Store.forget_facts`."""
        return self._opened().forget_facts(entity_id=entity_id, fact_ids=fact_ids)

    def stats(self) -> dict[str, int]:
        """See :meth:`memtap.storage.store.Store.stats`."""
        return self._opened().stats()

    def session_keys(self) -> Iterator[tuple[str, str]]:
        """See :meth:`memtap.storage.store.Store.session_keys`."""
        store = self._opened()
        keys = getattr(store, "session_keys", None)
        return iter(keys()) if keys is not None else iter(())

    def identity(self) -> str | None:
        """The held store's identity (its spool is the one calls are journaled to)."""
        return self._held.identity

    def close(self) -> None:
        """Close the store if it was opened (idempotent)."""
        with self._lock:
            self._closed = True
            store, self._store = self._store, None
        if store is not None:
            store.close()
