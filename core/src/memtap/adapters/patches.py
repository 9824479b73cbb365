"""Setting attributes on the objects an adapter patches, and undoing exactly that.

An adapter's ``install(client, tap)`` sets its wrappers on the client *instance* (or on a
module, as memtap-litellm does) and returns the function that restores it. :class:`Patches`
records each change with what stood there before, and :meth:`Patches.restore` puts it back:
a value the object held itself is set again, an attribute it did not hold (one its class
provides, or none at all) is deleted, so ``vars(obj)`` is what it was and class attributes
show through again. Restoring runs once, last change first.

Hand-written because what is needed is small and exact: ``unittest.mock.patch`` restores
through ``setattr`` / ``delattr`` too, but it is a test tool (it keeps a stack per target,
treats descriptors by its own rules and imports the mock machinery).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

log = logging.getLogger("memtap.adapters.patches")

_MISSING: Any = object()

T = TypeVar("T")


def own_value(obj: Any, name: str) -> Any:
    """The value ``obj`` holds itself under ``name`` (its ``__dict__``, or a slot), else
    a private marker: what an attribute set on ``obj`` replaces, not what its class shows."""
    namespace = getattr(obj, "__dict__", None)
    if namespace is not None:
        return namespace.get(name, _MISSING)
    return getattr(obj, name, _MISSING)  # no __dict__: a slot, or nothing


class Patches:
    """The attributes an adapter has set, each undone exactly by :meth:`restore`.

    ::

        patches = Patches()
        with patches.all_or_nothing():
            patches.wrap(client, "chat", lambda original: tracked(original, begin, outcome))
            patches.set(client, "_memtap_marked", True)
        return patches.restore   # the adapter's restore function
    """

    __slots__ = ("_undo",)

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, obj: Any, name: str, value: Any) -> None:
        """Set ``obj.name = value``; :meth:`restore` puts back what ``obj`` held itself,
        or deletes the attribute when it held none. If something else has replaced the
        value by then, it is left as it is (and a warning says so)."""
        previous = own_value(obj, name)
        setattr(obj, name, value)
        self._undo.append(lambda: _undo(obj, name, value, previous))

    def wrap(self, obj: Any, name: str, make: Callable[[Any], T]) -> T:
        """Replace ``obj.name`` with ``make(obj.name)`` (a wrapper of the current value,
        bound methods included); returns the replacement."""
        replacement = make(getattr(obj, name))
        self.set(obj, name, replacement)
        return replacement

    def on_restore(self, step: Callable[[], None]) -> None:
        """Run ``step`` on :meth:`restore`, in reverse order with the attributes (for what
        is not an attribute: a cache to drop, a count to release)."""
        self._undo.append(step)

    def restore(self) -> None:
        """Undo every change, last first. Runs once: a second call does nothing. A step
        that fails is logged and the others still run."""
        steps, self._undo = self._undo, []
        for step in reversed(steps):
            try:
                step()
            except Exception:
                log.exception("memtap could not undo one of its patches")

    @contextmanager
    def all_or_nothing(self) -> Iterator[Patches]:
        """Apply patches in the block: if one fails, those already made are undone and the
        error is raised (an adapter never leaves a client half patched)."""
        try:
            yield self
        except BaseException:
            self.restore()
            raise


def _undo(obj: Any, name: str, value: Any, previous: Any) -> None:
    if own_value(obj, name) is not value:
        log.warning(
            "memtap: %s.%s was replaced after memtap patched it; leaving it as it is",
            getattr(obj, "__name__", type(obj).__name__),
            name,
        )
        return
    if previous is _MISSING:
        delattr(obj, name)
    else:
        setattr(obj, name, previous)
