"""memtap's local embedder: all-MiniLM-L6-v2 as int8 ONNX on onnxruntime, offline.

Answers the ``memtap_embedder`` hook for the names ``"default"`` and ``"minilm"``.
onnxruntime, tokenizers and numpy are imported when the first text is embedded, never by
``import memtap_minilm``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.hookspecs import hookimpl

if TYPE_CHECKING:
    from .embedder import MiniLMEmbedder

__all__ = ["NAMES", "MiniLMEmbedder", "memtap_embedder"]

#: The embedder specs this plugin answers.
NAMES = frozenset({"default", "minilm", "minilm-l6-v2-int8"})


@hookimpl
def memtap_embedder(spec: str) -> MiniLMEmbedder | None:
    """A MiniLM embedder for ``"default"`` / ``"minilm"``; ``None`` for other specs."""
    if spec not in NAMES:
        return None
    from .embedder import MiniLMEmbedder

    return MiniLMEmbedder()


def __getattr__(name: str) -> Any:
    if name == "MiniLMEmbedder":
        from .embedder import MiniLMEmbedder

        return MiniLMEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
