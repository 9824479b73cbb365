"""Per-call attribution on context variables (one per Memory): correct per thread and per
asyncio task, and never shared between Memory instances."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

from memtap.protocol.model import Attribution


class AttributionScopes:
    """Who one :class:`memtap.Memory`'s calls are attributed to: its defaults, overridden by
    the scopes opened on that Memory (and only on it: each Memory has its own context
    variable, so a scope on one Memory never changes another's attribution).

    Correct per thread and per asyncio task: a new thread starts outside any scope; an
    asyncio task starts in the scopes active where it was created.
    """

    def __init__(self, default: Attribution) -> None:
        self.default = default
        self._current: contextvars.ContextVar[Attribution | None] = contextvars.ContextVar(
            f"memtap_attribution_{id(self):x}", default=None
        )

    def current(self) -> Attribution:
        """The attribution of the innermost active scope, else the defaults."""
        return self._current.get() or self.default

    @contextmanager
    def scope(
        self,
        *,
        entity_id: str | None = None,
        process_id: str | None = None,
        session_id: str | None = None,
    ) -> Iterator[Attribution]:
        """Attribute the calls made inside the ``with`` block. Fields left as ``None`` are
        inherited from the enclosing scope (or the defaults)."""
        changes = {
            k: v
            for k, v in (("entity_id", entity_id), ("process_id", process_id), ("session_id", session_id))
            if v is not None
        }
        for name, value in changes.items():
            if not isinstance(value, str) or not value:
                raise ValueError(f"scope {name} must be a non-empty string, got {value!r}")
        inner = attrs.evolve(self.current(), **changes)
        token = self._current.set(inner)
        try:
            yield inner
        finally:
            self._current.reset(token)


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
