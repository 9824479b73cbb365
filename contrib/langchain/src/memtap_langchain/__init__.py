"""memtap for LangChain v1: :class:`MemoryMiddleware` for ``create_agent`` and registration
of framework chat models. Importing this package does not import LangChain; the middleware
is loaded on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .models import ChatModelAdapter

if TYPE_CHECKING:
    from .middleware import MemoryMiddleware

__all__ = ["ChatModelAdapter", "MemoryMiddleware"]


def __getattr__(name: str) -> Any:
    if name == "MemoryMiddleware":
        from .middleware import MemoryMiddleware

        return MemoryMiddleware
    raise AttributeError(f"module 'memtap_langchain' has no attribute {name!r}")
