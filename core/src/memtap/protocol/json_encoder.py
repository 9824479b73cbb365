"""Compact UTF-8 JSON: the encoder the spool, the SQL stores and redaction write with.

Depends on nothing of memtap (the standard library, and pydantic-core's faster encoder when it
is installed), so storage and the spool use it without depending on redaction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

__all__ = ["compact_encoder", "encode_json"]


class _CompactEncoder(json.JSONEncoder):
    """:class:`json.JSONEncoder` of compact UTF-8 text whose :meth:`encode` reuses one C
    encoder for dicts and lists: ``JSONEncoder.encode`` makes a new one for each (half the
    cost of encoding a small request body). That one is made without the circular-reference
    check, which needs state per call: what memtap encodes is JSON data (a request body the
    SDK has encoded already, a record); a structure that holds itself ends in a
    ``RecursionError`` instead of a ``ValueError``."""

    def __init__(self, default: Callable[[Any], Any] | None) -> None:
        super().__init__(ensure_ascii=False, separators=(",", ":"), default=default)
        make = getattr(json.encoder, "c_make_encoder", None)
        strings = getattr(json.encoder, "c_encode_basestring", None)
        # c_make_encoder(markers, default, encoder, indent, key_separator, item_separator,
        #                sort_keys, skipkeys, allow_nan): what JSONEncoder.iterencode passes.
        self._containers = (
            make(None, self.default, strings, None, ":", ",", False, False, True)
            if make is not None and strings is not None
            else None
        )

    def encode(self, o: Any) -> str:
        """``o`` as compact JSON text."""
        kind = type(o)
        if self._containers is not None and (kind is dict or kind is list):
            return "".join(self._containers(o, 0))
        return super().encode(o)


@functools.lru_cache(maxsize=16)
def compact_encoder(default: Callable[[Any], Any] | None = None) -> json.JSONEncoder:
    """The JSON encoder of compact UTF-8 text (``json.dumps(obj, ensure_ascii=False,
    separators=(",", ":"), default=default)``), made once per ``default``: ``json.dumps``
    with options builds a new encoder on every call, a cost as large as encoding a small
    request body. Encoding with it is thread-safe (each call has its own state)."""
    return _CompactEncoder(default)


def _pydantic_encoder() -> Callable[..., bytes] | None:
    """pydantic-core's JSON encoder (Rust), when it is installed (imported at the first
    encoding, not by ``import memtap``).

    It writes the small structures of a call (a record of the spool, a stream's events)
    4-8 times faster than the standard library's, whose C encoder makes a string per token.
    It is installed with every SDK memtap taps (openai, anthropic, google-genai and litellm
    build on pydantic), but it is not a dependency of memtap-core: without it (the proxy
    alone) the standard library writes the same data (numbers may be spelt otherwise:
    ``1.5e-7``, ``1.5e-07``; strings are written byte for byte alike)."""
    try:
        from pydantic_core import to_json
    except ImportError:
        return None
    return to_json


_UNRESOLVED: Any = object()
#: :func:`_pydantic_encoder`'s answer, once asked (``None``: not installed).
_fast_to_json: Any = _UNRESOLVED


def encode_json(obj: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact UTF-8 JSON of ``obj``: ``compact_encoder(default).encode(obj).encode()``,
    written by pydantic-core's faster encoder when it is installed. For JSON data (dicts,
    lists, strings, numbers, booleans, ``None``, as :func:`~memtap.redact.redact_json` returns them), both
    write what decodes to the same data; other objects go to ``default`` with the standard
    library, while pydantic-core writes those it knows (a datetime, a model) itself. Falls
    back to the standard library whenever pydantic-core cannot encode ``obj`` (nesting
    deeper than it goes, a string UTF-8 cannot hold: then the standard library raises)."""
    global _fast_to_json
    fast = _fast_to_json
    if fast is _UNRESOLVED:
        fast = _fast_to_json = _pydantic_encoder()
    if fast is not None:
        try:
            data: bytes = fast(obj, fallback=default or str)
            return data
        except Exception:  # e.g. a string it cannot write: the standard library decides
            pass
    return compact_encoder(default).encode(obj).encode()
