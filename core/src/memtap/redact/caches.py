"""What redaction remembers between calls: texts scanned before and their redacted forms,
short texts, keys and stream pieces found clean, the JSON encoding of long strings.

An agent's system prompt, tool definitions and earlier turns come back on every call:
scanned once, they cost a lookup afterwards. :func:`clear_cache` forgets it all but the
encodings (for benchmarks and tests).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

#: Texts at least this long are remembered once scanned (an agent's system prompt, tool
#: definitions and earlier turns come back on every call).
CACHE_MIN_CHARS = 24
#: Characters of text the cache keeps at most (oldest entries are dropped beyond; each
#: entry also counts :data:`_ENTRY_COST` for its bookkeeping).
CACHE_MAX_CHARS = 8_000_000
_ENTRY_COST = 64


class _Cache:
    """Scanned texts and their redacted forms (``None``: nothing to redact).

    Keyed by the text itself, so a hit is exact (an equal string always redacts the same
    way); a string object seen again hashes in O(1) (CPython caches a str's hash). Readers
    look ``data`` up without the lock (``data.get(text, _UNSEEN)``: one dict operation);
    writers go through :meth:`put`.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        # Ordered: dropping the oldest is O(1). A dict's first key, after many deletions at
        # its front, is found by skipping their holes: 2.6 µs per eviction at 4,096 entries,
        # 19 µs at 50,000 (measured), paid by every new text once the cache is full.
        self.data: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, text: str, redacted: str | None) -> None:
        with self._lock:
            if text in self.data:
                return
            self.data[text] = redacted
            self.chars += len(text) + _ENTRY_COST
            while self.chars > self.max_chars and self.data:
                oldest, _ = self.data.popitem(last=False)
                self.chars -= len(oldest) + _ENTRY_COST

    def clear(self) -> None:
        with self._lock:
            self.data.clear()
            self.chars = 0


_CACHE = _Cache(CACHE_MAX_CHARS)

#: How many short texts :data:`_CLEAN_SHORT` holds before it is emptied.
CLEAN_SHORT_MAX = 65_536
#: Short texts (under :data:`CACHE_MIN_CHARS`) scanned and found clean. A body's keys and
#: short values ("content", "assistant", "function", "finish_reason") come back on every
#: call, and a set lookup costs less than scanning them again. Kept apart from the cache of
#: scanned texts: no redacted form, no size accounting, no lock (one set operation each);
#: emptied when full (short texts mostly either recur on every call or never).
_CLEAN_SHORT: set[str] = set()


def _remember_clean_short(text: str) -> None:
    if len(_CLEAN_SHORT) >= CLEAN_SHORT_MAX:
        _CLEAN_SHORT.clear()
    _CLEAN_SHORT.add(text)


#: Keys found clean (scanned, or too short to hold a secret), with their
#: :func:`key_kind`: the keys of request bodies and answers repeat on every call. Bounded:
#: past :data:`~memtap.redact.structures._CLEAN_KEYS_MAX` new keys are not remembered
#: (they are still checked).
_CLEAN_KEYS: dict[str, str | None] = {}


class _CleanPieces:
    """The groups of stream pieces (the strings at one place of successive events, in
    order) found to hold no secret, remembered by their exact pieces: every event of a
    stream repeats its model, object type and fingerprint, and every stream of a client the
    same ones, so that their scans (the pieces joined, and each alone) are made once. Keyed
    by the pieces themselves, not their join: the same text cut elsewhere is scanned anew
    (a cut decides what the scan of each piece alone sees). Bounded (oldest forgotten)."""

    def __init__(self, max_groups: int) -> None:
        self.max_groups = max_groups
        self._groups: OrderedDict[tuple[str, ...], None] = OrderedDict()  # see _Cache.data
        self._lock = threading.Lock()

    def __contains__(self, pieces: tuple[str, ...]) -> bool:
        return pieces in self._groups

    def add(self, pieces: tuple[str, ...]) -> None:
        if sum(map(len, pieces)) > _CLEAN_PIECES_MAX_CHARS:
            return  # long answers do not come back: not worth the room
        with self._lock:
            self._groups[pieces] = None
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()


#: The longest group of stream pieces remembered as clean (an answer's text rarely comes
#: back cut the same way; a model name, an id or a fingerprint do).
_CLEAN_PIECES_MAX_CHARS = 1024
_CLEAN_PIECES = _CleanPieces(4096)


#: Strings at least this long are encoded once and their JSON kept
#: (see :func:`~memtap.redact.dumps.dumps_redacted`).
ENCODE_CACHE_MIN_CHARS = 1024


class _Encoded:
    """The UTF-8 JSON encoding of long (redacted) strings, bounded by bytes (oldest first)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._data: OrderedDict[str, bytes] = OrderedDict()  # see _Cache.data
        self._lock = threading.Lock()

    def __contains__(self, text: str) -> bool:
        return text in self._data

    def get(self, text: str) -> bytes:
        try:
            return self._data[text]
        except KeyError:
            pass
        data = json.dumps(text, ensure_ascii=False).encode()
        with self._lock:
            if text not in self._data:
                self._data[text] = data
                self.size += len(data)
                while self.size > self.max_bytes and self._data:
                    self.size -= len(self._data.popitem(last=False)[1])
        return data


_ENCODED = _Encoded(32_000_000)


#: Not in the cache of scanned texts (``None`` there means: scanned, nothing to redact).
_UNSEEN: Any = object()


def clear_cache() -> None:
    """Forget every scanned text (for benchmarks and tests)."""
    _CACHE.clear()
    _CLEAN_SHORT.clear()
    _CLEAN_KEYS.clear()
    _CLEAN_PIECES.clear()
