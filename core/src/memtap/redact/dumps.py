"""Redacted compact UTF-8 JSON, as the spool writes it: long strings' encodings kept."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from memtap.protocol.json_encoder import encode_json
from memtap.redact.caches import _ENCODED, ENCODE_CACHE_MIN_CHARS
from memtap.redact.structures import _FLAGGED, _LONG, _redact_json

_NONCE = os.urandom(6).hex()


def dumps_redacted(obj: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact UTF-8 JSON of ``obj`` with every secret replaced (:func:`redact_json`).

    Long strings (an agent's system prompt, earlier turns) come back on every call: their
    JSON encoding is kept, and each call encodes only the rest (the long strings are swapped
    for placeholders that cannot occur in text, the rest is encoded, and the kept encodings
    are joined in), so a 70 KB body costs about a copy of it.
    """
    redacted, found = _redact_json(obj, default)
    return _encode_keeping_long(redacted, found, default)


def dumps_redacted_record(
    fields: Mapping[str, Any], parts: Mapping[str, Any], default: Callable[[Any], Any] | None = None
) -> bytes:
    """Compact UTF-8 JSON of one object: ``fields`` as they are (values the caller made or
    redacted itself), then ``parts`` redacted as :func:`dumps_redacted` redacts one value
    (all of their strings gathered and scanned at once, and encoded in one piece)."""
    names = list(parts)
    redacted, found = _redact_json([parts[name] for name in names], default)
    record = dict(fields)
    record.update(zip(names, redacted))
    return _encode_keeping_long(record, found, default)


def _encode_keeping_long(obj: Any, found: int, default: Callable[[Any], Any] | None) -> bytes:
    """:func:`encode_json` of ``obj`` (redacted, with :func:`_collect`'s findings), its long
    strings' encodings kept (:data:`_ENCODED`)."""
    longs: list[str] = []
    light = _lift(obj, longs) if found & (_LONG | _FLAGGED) else obj
    data = encode_json(light, default)
    if not longs:
        return data
    pieces = data.split(_PLACEHOLDER_OPENING)
    out = [pieces[0]]
    for piece in pieces[1:]:
        index, rest = piece.split(b'\\u0000"', 1)
        out.append(_ENCODED.get(longs[int(index)]))
        out.append(rest)
    return b"".join(out)


#: How a placeholder of :func:`_lift` starts, encoded (either encoder writes NUL so).
_PLACEHOLDER_OPENING = f'"\\u0000{_NONCE}'.encode()


def _lift(obj: Any, longs: list[str]) -> Any:
    """``obj`` with its long strings replaced by placeholders (copies only what changes)."""
    if isinstance(obj, str):
        if len(obj) < ENCODE_CACHE_MIN_CHARS:
            return obj
        longs.append(obj)
        return f"\x00{_NONCE}{len(longs) - 1}\x00"
    if isinstance(obj, dict):
        out = {k: _lift(v, longs) for k, v in obj.items()}
        return obj if all(out[k] is v for k, v in obj.items()) else out
    if isinstance(obj, list):
        items = [_lift(v, longs) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else items
    return obj
