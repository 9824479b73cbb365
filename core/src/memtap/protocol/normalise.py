"""How texts are compared: one rule for every room (stored ids, recall's duplicates, a
session's kept blocks), at the bottom floor so that each can import it."""

from __future__ import annotations

import re
from functools import lru_cache

_SPACES = re.compile(r"\s+")


def normalise(text: str) -> str:
    """``text`` as texts are compared: spacing collapsed to single blanks, trimmed, lower
    case. Decides stored ids (episodes, facts said again), so what it returns for a text
    must never change."""
    # A session's history messages are compared again on every call: short texts are
    # cached (long ones, such as tool outputs, are not kept alive by the cache).
    return _normalise_short(text) if len(text) <= 2048 else _normalise(text)


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", text).strip().lower()


_normalise_short = lru_cache(maxsize=8192)(_normalise)
