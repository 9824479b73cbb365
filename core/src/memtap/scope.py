"""Per-call attribution on context variables: correct per thread and per asyncio task."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

from .model import Attribution

_current: contextvars.ContextVar[Attribution | None] = contextvars.ContextVar(
    "memtap_attribution", default=None
)


def current_attribution(default: Attribution) -> Attribution:
    """The attribution of the innermost active scope, else ``default``."""
    return _current.get() or default


@contextmanager
def attribution_scope(
    default: Attribution,
    *,
    entity_id: str | None = None,
    process_id: str | None = None,
    session_id: str | None = None,
) -> Iterator[Attribution]:
    """Attribute the calls made inside the ``with`` block.

    Fields left as ``None`` are inherited from the enclosing scope (or ``default``). A new
    thread starts outside any scope; an asyncio task starts in the scope it was created in.
    """
    outer = current_attribution(default)
    changes = {
        k: v
        for k, v in (("entity_id", entity_id), ("process_id", process_id), ("session_id", session_id))
        if v is not None
    }
    for name, value in changes.items():
        if not isinstance(value, str) or not value:
            raise ValueError(f"scope {name} must be a non-empty string, got {value!r}")
    inner = attrs.evolve(outer, **changes)
    token = _current.set(inner)
    try:
        yield inner
    finally:
        _current.reset(token)


_internal: contextvars.ContextVar[bool] = contextvars.ContextVar("memtap_internal", default=False)


def in_internal_call() -> bool:
    """Whether the current context is memtap's own LLM work (memorize), which a registered
    client must neither inject into nor capture (it would memorize itself forever)."""
    return _internal.get()


@contextmanager
def internal_calls() -> Iterator[None]:
    """Mark LLM calls made inside the ``with`` block as memtap's own."""
    token = _internal.set(True)
    try:
        yield
    finally:
        _internal.reset(token)
