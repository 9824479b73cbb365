"""Errors memtap raises to its users; each message says what to do."""

from __future__ import annotations

from typing import Any

__all__ = ["MemtapError", "StoreError", "UnknownStoreURLError", "UnsupportedClientError"]


class MemtapError(Exception):
    """Base class of every error memtap raises to its users (each also keeps the standard
    base that fits it: ``ValueError``, ``TypeError``...)."""


class StoreError(MemtapError):
    """A storage backend failed; the message says what to do about it."""


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
            f"`pip install memtap-openai`), or write one (see docs/plugin-authoring.md)."
        )
