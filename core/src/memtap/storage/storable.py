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
    if type(obj) is str:
        if (obj.isascii() and not refused) or search(obj) is None:
            return obj
        return storable_text(obj, refused)
    if isinstance(obj, tuple | list):
        items = [_storable(item, search, refused) for item in obj]
        if all(new is old for new, old in zip(items, obj, strict=True)):
            return obj
        return type(obj)(items) if type(obj) in (tuple, list) else obj.__class__(*items)
    if isinstance(obj, dict):
        pairs = [(_storable(k, search, refused), _storable(v, search, refused)) for k, v in obj.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, obj.items(), strict=True)):
            return obj
        return type(obj)(pairs)
    if attrs.has(type(obj)):
        changes = {}
        for field in attrs.fields(type(obj)):
            if not field.init:
                continue
            value = getattr(obj, field.name)
            new = _storable(value, search, refused)
            if new is not value:
                changes[field.alias or field.name] = new
        return attrs.evolve(obj, **changes) if changes else obj
    return obj
