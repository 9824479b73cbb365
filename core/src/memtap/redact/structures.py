"""Redacting JSON data (dicts, lists, strings, numbers): every new string of a structure
joined into one text and scanned once; whole values of secret-named keys."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memtap.redact.assignments import _key_kind_cached, is_secret_value
from memtap.redact.caches import (
    _CACHE,
    _CLEAN_KEYS,
    _CLEAN_SHORT,
    _ENCODED,
    _UNSEEN,
    CACHE_MIN_CHARS,
    ENCODE_CACHE_MIN_CHARS,
    _remember_clean_short,
)
from memtap.redact.detectors import MIN_SECRET_CHARS
from memtap.redact.scanner import _SCANNER, REDACTED, _apply
from memtap.redact.text import redact_text

_SEPARATOR = "\x00"
_JSON_SCALARS = (int, float, bool, type(None))
_CONTAINERS = frozenset((dict, list, tuple))
_SCALAR_TYPES = frozenset(_JSON_SCALARS)


def redact_json(obj: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """A JSON-like structure (dicts, lists, strings, numbers) with every secret replaced:
    secrets inside strings (values and keys), and whole values of secret-named keys
    (``{"password": "hunter2"}``). Objects that are not JSON types are first converted by
    ``default`` (as :func:`json.dumps` would; ``str`` when ``None``). Returns ``obj`` itself
    when there is nothing to redact, else a copy where only the changed branches are new.

    Every string not already known is scanned in one pass (joined), so a body of many
    small strings costs one scan, and long strings seen before (:data:`CACHE_MIN_CHARS`)
    are not scanned again.
    """
    return _redact_json(obj, default)[0]


#: :func:`_collect`'s findings: a value that must go or be converted, a long string.
_FLAGGED = 1
_LONG = 2


def _redact_json(obj: Any, default: Callable[[Any], Any] | None) -> tuple[Any, int]:
    """:func:`redact_json`, and what :func:`_collect` found (``_FLAGGED``, ``_LONG``)."""
    convert = default or str
    pending: dict[str, None] = {}
    found = _collect(obj, pending, convert)
    results: dict[str, str] = {}
    if pending:
        _scan_many(list(pending), results)
    if not results and not found & _FLAGGED:
        return obj, found
    return _rebuild(obj, results, convert), found


def new_text(obj: Any, enough: int, *, max_nodes: int = 512) -> int:
    """How many characters of ``obj``'s strings redaction and encoding have not seen yet,
    counted until ``enough`` (a bound, not a total: it stops there, and after ``max_nodes``
    values it answers ``enough``)."""
    stack = [obj]
    seen = 0
    nodes = 0
    cached = _CACHE.data
    while stack:
        item = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return enough
        kind = type(item)
        if kind is str or (kind not in _CONTAINERS and isinstance(item, str)):
            n = len(item)
            if n < MIN_SECRET_CHARS:
                continue
            known = item in cached if n >= CACHE_MIN_CHARS else item in _CLEAN_SHORT
            if not known or (n >= ENCODE_CACHE_MIN_CHARS and item not in _ENCODED):
                seen += n
            if seen >= enough:
                return seen
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind in _SCALAR_TYPES:
            continue
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return seen


def _collect(obj: Any, pending: dict[str, None], convert: Callable[[Any], Any]) -> int:
    """Gather the strings of ``obj`` to scan; the result has ``_FLAGGED`` if a secret-named
    key holds a value that must go (or a non-JSON object must be converted), ``_LONG`` if
    a string is long enough for :func:`dumps_redacted` to keep its encoding.

    Dicts, lists and strings are told apart by their exact type first: this walk runs on
    every request body, and an ``isinstance`` test against ``Mapping`` (an abstract class)
    costs several times a type comparison."""
    kind = type(obj)
    if kind is str:
        return _collect_text(obj, pending)
    if kind is dict:
        return _collect_items(obj, pending, convert)
    if kind is list or kind is tuple:
        return _collect_all(obj, pending, convert)
    if kind in _SCALAR_TYPES:
        return 0
    if isinstance(obj, str):
        return _collect_text(obj, pending)
    if isinstance(obj, Mapping):
        return _collect_items(obj, pending, convert)
    if isinstance(obj, (list, tuple)):
        return _collect_all(obj, pending, convert)
    return 0 if isinstance(obj, _JSON_SCALARS) else _FLAGGED  # any other object is converted


def _collect_all(items: Iterable[Any], pending: dict[str, None], convert: Callable[[Any], Any]) -> int:
    """:func:`_collect` of a list or tuple's items."""
    found = 0
    for item in items:
        kind = type(item)
        if kind is str:
            found |= _collect_text(item, pending)
        elif kind not in _SCALAR_TYPES:
            found |= _collect(item, pending, convert)
    return found


def _collect_text(text: str, pending: dict[str, None]) -> int:
    """:func:`_collect` of one string."""
    n = len(text)
    found = _LONG if n >= ENCODE_CACHE_MIN_CHARS else 0
    if n >= MIN_SECRET_CHARS and text not in pending:
        if n < CACHE_MIN_CHARS:
            if text not in _CLEAN_SHORT:
                pending[text] = None
        else:
            cached = _CACHE.data.get(text, _UNSEEN)
            if cached is _UNSEEN:
                pending[text] = None
            elif cached is not None:
                return found | _FLAGGED
    return found


def _collect_items(obj: Mapping[Any, Any], pending: dict[str, None], convert: Callable[[Any], Any]) -> int:
    """:func:`_collect` of a mapping: its keys, its values, and the values of secret-named
    keys. A key found clean before costs one lookup (:data:`_CLEAN_KEYS`), and so does a
    short value known clean: the keys and short values of bodies and answers repeat."""
    found = 0
    keys = _CLEAN_KEYS
    for key, value in obj.items():
        kind = keys.get(key, _UNSEEN)
        if kind is _UNSEEN:
            kind = _new_key(key, pending) if isinstance(key, str) else None
            if kind is _FLAGGED_KEY:
                found |= _FLAGGED
                kind = _key_kind_cached(key)
        value_kind = type(value)
        if kind is not None and isinstance(value, str) and is_secret_value(kind, value):
            found |= _FLAGGED
        elif value_kind is str:
            n = len(value)
            if n >= MIN_SECRET_CHARS and not (n < CACHE_MIN_CHARS and value in _CLEAN_SHORT):
                found |= _collect_text(value, pending)
        elif value_kind is dict:
            found |= _collect_items(value, pending, convert)
        elif value_kind not in _SCALAR_TYPES:
            found |= _collect(value, pending, convert)
    return found


#: How many keys :data:`~memtap.redact.caches._CLEAN_KEYS` remembers at most.
_CLEAN_KEYS_MAX = 10_000
#: :func:`_new_key`'s answer for a key that holds a secret itself.
_FLAGGED_KEY: Any = object()


def _new_key(key: str, pending: dict[str, None]) -> Any:
    """A key not known clean: gathered to be scanned when long enough (as any string),
    remembered in :data:`_CLEAN_KEYS` once known clean. Returns its kind, or
    :data:`_FLAGGED_KEY` when the key itself is a known secret."""
    n = len(key)
    if n >= MIN_SECRET_CHARS and _collect_text(key, pending) & _FLAGGED:
        return _FLAGGED_KEY
    kind = _key_kind_cached(key)
    if n < MIN_SECRET_CHARS:
        known = True
    elif n < CACHE_MIN_CHARS:
        known = key in _CLEAN_SHORT
    else:
        known = _CACHE.data.get(key, _UNSEEN) is None
    if known and len(_CLEAN_KEYS) < _CLEAN_KEYS_MAX:
        _CLEAN_KEYS[key] = kind
    return kind


def _spans_each(texts: list[str]) -> dict[int, list[tuple[int, int, str]]]:
    """The secrets of each of ``texts`` alone (offsets in it), by index: one scan of them
    joined by a separator no secret crosses."""
    spans = _SCANNER.spans(_SEPARATOR.join(texts))
    hits: dict[int, list[tuple[int, int, str]]] = {}
    if not spans:
        return hits
    starts = []
    offset = 0
    for t in texts:
        starts.append(offset)
        offset += len(t) + 1
    for start, end, name in spans:
        i = bisect.bisect_right(starts, start) - 1
        base = starts[i]
        hits.setdefault(i, []).append((start - base, min(end, base + len(texts[i])) - base, name))
    return hits


def _scan_many(texts: list[str], results: dict[str, str]) -> None:
    """Scan ``texts`` as one joined text; record those that change in ``results``."""
    hits = _spans_each(texts)
    for i, t in enumerate(texts):
        found = hits.get(i)
        redacted = _apply(t, found) if found else None
        if redacted is not None:
            results[t] = redacted
        if len(t) >= CACHE_MIN_CHARS:
            _CACHE.put(t, redacted)
        elif redacted is None:
            _remember_clean_short(t)


def _scanned(text: str, results: dict[str, str]) -> str:
    """``text`` redacted, once the strings :func:`_collect` gathered are scanned
    (:func:`_scan_many`): changed in ``results``, else unchanged when short (each short one
    was scanned, or is known clean: :data:`_CLEAN_SHORT`), else from the cache (scanned
    again if dropped from it since)."""
    found = results.get(text)
    if found is not None:
        return found
    return redact_text(text) if len(text) >= CACHE_MIN_CHARS else text


def _rebuild(obj: Any, results: dict[str, str], convert: Callable[[Any], Any]) -> Any:
    if isinstance(obj, str):
        return _scanned(obj, results)
    if isinstance(obj, Mapping):
        changed = not isinstance(obj, dict)
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            new_key = _rebuild(key, results, convert) if isinstance(key, str) else key
            if isinstance(key, str) and isinstance(value, str):
                kind = _key_kind_cached(key)
                if kind is not None and is_secret_value(kind, value):
                    out[new_key] = REDACTED
                    changed = True
                    continue
            new_value = _rebuild(value, results, convert)
            changed = changed or new_key is not key or new_value is not value
            out[new_key] = new_value
        return out if changed else obj
    if isinstance(obj, (list, tuple)):
        items = [_rebuild(item, results, convert) for item in obj]
        if isinstance(obj, list) and all(a is b for a, b in zip(items, obj)):
            return obj
        return items
    if isinstance(obj, _JSON_SCALARS):
        return obj
    converted = convert(obj)
    if isinstance(converted, str):
        return redact_text(converted)
    return redact_json(converted, convert)
