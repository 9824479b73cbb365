"""Storage's default plugin: ``memory://`` store URLs open the in-process reference store."""

from __future__ import annotations

from memtap.protocol.markers import hookimpl
from memtap.storage.store import InMemoryStore, Store

__all__ = ["MemoryStorePlugin"]


class MemoryStorePlugin:
    """Answers ``memory://`` store URLs with :class:`~memtap.storage.store.InMemoryStore`."""

    @hookimpl
    def memtap_open_store(self, url: str) -> Store | None:
        """Open an in-process store for ``memory://`` URLs."""
        return InMemoryStore(url) if url.startswith("memory://") else None

    @hookimpl
    def memtap_store_schemes(self) -> list[str]:
        """``memory``."""
        return ["memory"]
