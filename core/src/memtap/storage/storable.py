"""Text every store can hold, made at capture: so that the common hostile record (a JSON body
may legally carry a lone surrogate such as ``\\ud800``, which UTF-8 cannot encode) is stored
with U+FFFD in its place instead of being refused.

Every store gets lone surrogates replaced (no UTF-8 encoder takes them). Characters only some
backends refuse are named by the store: a store whose text cannot hold some character
(PostgreSQL ``text`` and ``jsonb`` cannot hold NUL) declares them in its optional attribute
``unstorable_characters`` (see :func:`unstorable_characters`); they become U+FFFD too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

import attrs

__all__ = ["REPLACEMENT", "storable", "storable_text", "unstorable_characters"]

#: What an unstorable character becomes: the Unicode replacement character.
REPLACEMENT = "\ufffd"
#: Surrogates: a pair (joined into the character it encodes: ``json`` already joins
#: ``\\ud83d\\ude00``, but a Python string may hold the two halves), or a lone one.
_SURROGATES = r"[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]"

T = TypeVar("T")


def unstorable_characters(store: object) -> str:
    """The characters ``store`` says its text cannot hold (its optional attribute
    ``unstorable_characters``; none by default)."""
    found = getattr(store, "unstorable_characters", "")
    return found if isinstance(found, str) else ""


@lru_cache(maxsize=16)
def _pattern(refused: str) -> re.Pattern[str]:
    extra = "".join(re.escape(c) for c in sorted(set(refused)))
    return re.compile(_SURROGATES + (f"|[{extra}]" if extra else ""))


def _replace(match: re.Match[str]) -> str:
    found = match.group()
    if len(found) == 2:  # a surrogate pair: the character it stands for
        return found.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    return REPLACEMENT


def storable_text(text: str, refused: str = "") -> str:
    """``text`` with every lone surrogate, and every character of ``refused``, replaced by
    U+FFFD, and surrogate pairs joined (the same object when there is nothing to change)."""
    if text.isascii() and not refused:
        return text
    pattern = _pattern(refused)
    if pattern.search(text) is None:
        return text
    return pattern.sub(_replace, text)


def storable(obj: T, refused: str = "") -> T:
    """``obj`` (an :class:`~memtap.protocol.model.Exchange`, a fact, any attrs object, dict,
    list, tuple or string made of them) with :func:`storable_text` applied to every string,
    keys included. Objects with nothing to replace are returned as they are (no copy)."""
    return _storable(obj, _pattern(refused).search, refused)  # type: ignore[no-any-return]


def _storable(obj: Any, search: Callable[[str], object], refused: str) -> Any:
    kind = type(obj)
    if kind is str:
        if (obj.isascii() and not refused) or search(obj) is None:
            return obj
        return storable_text(obj, refused)
    walk = _WALKS.get(kind)
    if walk is None:
        walk = _WALKS[kind] = _walk_of(kind)
    if walk == _ATOM:
        return obj
    # Below, values that need no walk (numbers, None, ASCII text when nothing else is
    # refused: most of an exchange's) are taken as they are without a call.
    ascii_ok = not refused
    if walk == _SEQUENCE:
        items = [
            item
            if type(item) in _SCALARS or (ascii_ok and type(item) is str and item.isascii())
            else _storable(item, search, refused)
            for item in obj
        ]
        if all(new is old for new, old in zip(items, obj, strict=True)):
            return obj
        return kind(items) if kind in (tuple, list) else obj.__class__(*items)
    if walk == _MAPPING:
        pairs = [
            (
                k if ascii_ok and type(k) is str and k.isascii() else _storable(k, search, refused),
                v
                if type(v) in _SCALARS or (ascii_ok and type(v) is str and v.isascii())
                else _storable(v, search, refused),
            )
            for k, v in obj.items()
        ]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, obj.items(), strict=True)):
            return obj
        return kind(pairs)
    changes = {}
    for name, alias in walk:  # type: ignore[union-attr]
        value = getattr(obj, name)
        if type(value) in _SCALARS or (ascii_ok and type(value) is str and value.isascii()):
            continue
        new = _storable(value, search, refused)
        if new is not value:
            changes[alias] = new
    return attrs.evolve(obj, **changes) if changes else obj


#: Values with no text in them.
_SCALARS = frozenset({int, float, bool, type(None)})
_ATOM, _SEQUENCE, _MAPPING = 0, 1, 2
#: How each type is walked, found once per type (an exchange holds a few hundred values:
#: its messages, and what was injected into its call, the facts with their scores).
_WALKS: dict[type, int | tuple[tuple[str, str], ...]] = {}


def _walk_of(kind: type) -> int | tuple[tuple[str, str], ...]:
    """How :func:`_storable` walks a value of type ``kind``: as a sequence, a mapping, by
    the (name, init alias) of an attrs class's init fields, or not at all (an atom)."""
    if issubclass(kind, tuple | list):
        return _SEQUENCE
    if issubclass(kind, dict):
        return _MAPPING
    if attrs.has(kind):
        return tuple((f.name, f.alias or f.name) for f in attrs.fields(kind) if f.init)
    return _ATOM
