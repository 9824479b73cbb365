"""Values made from objects that come back, remembered by the objects' identity."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    """What ``make(obj)`` returned, remembered by ``obj``'s identity: for objects that are
    equal only to themselves in practice but come back call after call (a session's
    history turns, injected again on every call), where hashing by value would cost what
    making the value costs. Each entry keeps its object, so an id is never that of another
    object. Bounded: emptied when full (what comes back next is made once more)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._made: dict[int, tuple[K, V]] = {}

    def get(self, obj: K, make: Callable[[K], V]) -> V:
        """``make(obj)``, made once while ``obj`` is remembered."""
        made = self._made.get(id(obj))
        if made is None or made[0] is not obj:
            made = (obj, make(obj))
            if len(self._made) >= self.size:
                self._made.clear()
            self._made[id(obj)] = made
        return made[1]
