"""Errors memtap raises to its users; each message says what to do."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ForkedMemoryError",
    "MemtapError",
    "StoreError",
    "StoreLockedError",
    "UnknownStoreURLError",
    "UnsupportedClientError",
    "install_hint",
]

#: Distributions kept under contrib/ in a clone (the other plugins are under plugins/).
_CONTRIB = frozenset({"memtap-proxy", "memtap-langchain", "memtap-mcp", "memtap-ui"})
#: The meta-distribution pins memtap-core and the defaults: from a clone, all are installed.
_DEFAULTS_FROM_A_CLONE = "./core ./plugins/openai ./plugins/duckdb ./plugins/minilm ."


def install_hint(distribution: str) -> str:
    """How to install ``distribution`` (``"memtap-anthropic"``): its published name, and
    its folder in a clone of the repository (until it is published, only that works)."""
    if distribution == "memtap":
        folder = _DEFAULTS_FROM_A_CLONE
    elif distribution == "memtap-core":
        folder = "./core"
    else:
        group = "contrib" if distribution in _CONTRIB else "plugins"
        folder = f"./{group}/{distribution.removeprefix('memtap-')}"
    return f"`pip install {distribution}` (from a clone of memtap: `pip install {folder}`)"


class MemtapError(Exception):
    """Base class of every error memtap raises to its users (each also keeps the standard
    base that fits it: ``ValueError``, ``TypeError``...)."""


class StoreError(MemtapError):
    """A storage backend failed; the message says what to do about it."""


class RecordRefusedError(StoreError):
    """A store refused a write because of what the records hold (text it cannot encode, a
    value too large, a constraint), not because it is unavailable: the same records would
    be refused again. The capture writer isolates such a record from its batch and puts it
    in quarantine (:mod:`memtap.capture.quarantine`) instead of retrying it."""


class StoreLockedError(StoreError):
    """Another process holds the store (a DuckDB file is open in one process at a time).

    ``identity`` is the store's :meth:`~memtap.storage.store.Store.identity` (what keys its
    durability spool), so that calls made meanwhile can be journaled for it."""

    def __init__(self, message: str, *, identity: str | None = None) -> None:
        super().__init__(message)
        self.identity = identity


#: What to do when another process holds a DuckDB store (every message about it names these).
LOCKED_STORE_WAYS_OUT = (
    "stop that process; or serve the UI from the app that holds the store "
    "(`memtap_ui.start(mem)`) or from the proxy (`memtap proxy --ui`); or give this process its "
    "own file (--store / MEMTAP_STORE=duckdb:///other.duckdb); or share one store between "
    "processes with PostgreSQL (postgresql://...)"
)


class ForkedMemoryError(MemtapError, RuntimeError):
    """A :class:`memtap.Memory` was used in a process forked from the one that created it.

    Its store connection, spool and threads belong to the parent: using them from the
    child would corrupt the parent's (a PostgreSQL connection shared by two processes, a
    DuckDB file written by two). In the child, LLM calls through its registered clients
    pass through without memory, and its reading and writing methods raise this."""

    @classmethod
    def refusing(cls, what: str, parent: int, child: int) -> ForkedMemoryError:
        """The error for ``what`` (``"remember()"``), in ``child``, a fork of ``parent``."""
        return cls(
            f"{what} refused: this memtap.Memory was created in process {parent}, and process "
            f"{child} is a fork of it (its store connection and threads are the parent's; the "
            "clients registered there pass calls through here without memory). Create the "
            "Memory in each process after the fork: gunicorn, in a post_fork hook or without "
            "preload_app; celery, in worker_process_init; multiprocessing, with the 'spawn' or "
            "'forkserver' start method or in the child's target"
        )


class UnknownStoreURLError(MemtapError, ValueError):
    """No installed storage plugin understands a store URL."""


class UnsupportedClientError(MemtapError, TypeError):
    """No installed provider plugin recognises the object given to ``register``."""

    @classmethod
    def for_client(cls, client: Any, providers: list[str]) -> UnsupportedClientError:
        """The error for ``client``, naming the installed providers."""
        kind = client.__name__ if isinstance(client, type) else type(client).__qualname__
        module = getattr(client, "__module__", None) or type(client).__module__
        installed = ", ".join(providers) if providers else "none"
        return cls(
            f"memtap cannot register {module}.{kind}: no installed provider plugin recognises "
            f"it. Installed providers: {installed}. Install the plugin for this SDK (e.g. "
            f"{install_hint('memtap-openai')}), or write one (see docs/plugin-authoring.md)."
        )
