"""Redacting one text: plain text or JSON text, scanned once per distinct content."""

from __future__ import annotations

from memtap.redact.caches import _CACHE, _CLEAN_SHORT, _UNSEEN, CACHE_MIN_CHARS, _remember_clean_short
from memtap.redact.detectors import MIN_SECRET_CHARS
from memtap.redact.scanner import _SCANNER, _apply


def redact_text(text: str, *, remember: bool = True) -> str:
    """``text`` with every secret replaced by :data:`REDACTED` (the same object when there
    is none). Works on plain text and on JSON text alike: the result of redacting valid
    JSON is valid JSON. ``remember=False`` for a text that will not come back (a model's
    answer as JSON text, with its id): it is neither looked up nor kept in the cache of
    scanned texts, whose room is for what recurs (system prompts, earlier turns)."""
    n = len(text)
    if n < MIN_SECRET_CHARS:
        return text
    if n < CACHE_MIN_CHARS:
        if remember and text in _CLEAN_SHORT:
            return text
        spans = _SCANNER.spans(text)
        if not spans:
            if remember:
                _remember_clean_short(text)
            return text
        return _apply(text, spans)
    if remember:
        cached = _CACHE.data.get(text, _UNSEEN)
        if cached is not _UNSEEN:
            return text if cached is None else cached
    spans = _SCANNER.spans(text)
    result = _apply(text, spans) if spans else text
    if remember:
        _CACHE.put(text, None if result is text else result)
    return result
