"""memtap's local embedder: all-MiniLM-L6-v2 as int8 ONNX on onnxruntime, offline.

Answers the ``memtap_embedder`` hook for the names ``"default"`` and ``"minilm"`` (queries
embedded through the quick static table, :mod:`memtap_minilm.quick`), and
``"minilm-full"`` (every query through the full model: a little better recall, ~5 ms more
per query).
onnxruntime, tokenizers and numpy are imported when the first text is embedded, never by
``import memtap_minilm``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.sdk import hookimpl

if TYPE_CHECKING:
    from .embedder import MiniLMEmbedder

__all__ = ["NAMES", "MiniLMEmbedder", "memtap_embedder"]

#: The embedder specs this plugin answers.
NAMES = frozenset({"default", "minilm", "minilm-l6-v2-int8", "minilm-full"})


@hookimpl
def memtap_embedder(spec: str) -> MiniLMEmbedder | None:
    """A MiniLM embedder for ``"default"`` / ``"minilm"`` / ``"minilm-full"``; ``None``
    for other specs."""
    if spec not in NAMES:
        return None
    from .embedder import MiniLMEmbedder

    return MiniLMEmbedder(quick_queries=spec != "minilm-full")


def __getattr__(name: str) -> Any:
    if name == "MiniLMEmbedder":
        from .embedder import MiniLMEmbedder

        return MiniLMEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
