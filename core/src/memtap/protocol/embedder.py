"""The embedder port: what recall needs to turn text into vectors (a contract, a leaf).

An embedder is any object with a ``name`` (which identifies its vector space: vectors
stored under one name are never compared with another's) and ``embed(texts)`` returning
one row of floats per text (a 2-D numpy array or a list of lists). How one is chosen:
:func:`memtap.longterm.embedding.resolve_embedder`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["Embedder", "EmbedderOption"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. Must be thread-safe; may be slow (it is called off the
    request path, except for the one query of a call, which has a deadline)."""

    #: Identifies the model and its vector space, e.g. ``"minilm-l6-v2-int8"``.
    name: str

    def embed(self, texts: Sequence[str]) -> Any:
        """One vector per text, in order (a 2-D array-like of floats).

        An embedder may also have ``quick_query(text)``: a cheap vector for a short query
        in the same space (or ``None`` when it has none at the moment). Recall then uses
        it instead of :meth:`embed` for queries, on the request path and off it (it must
        never load anything itself). An embedder that loads a model may have
        ``warm_up()``: load it now; memtap calls it once in a background thread and, until
        it returns, does not wait for the model on request paths."""


EmbedderOption = Embedder | str | bool | None
