"""A remote embedder through litellm, and core's default plugin answering ``litellm:<model>``
embedder specs with it (litellm is imported on first use only)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from memtap.protocol.embedder import Embedder
from memtap.protocol.markers import hookimpl

__all__ = ["LITELLM_PREFIX", "LiteLLMEmbedder", "LiteLLMEmbedderPlugin"]

#: Embedder specs with this prefix name a litellm embedding model.
LITELLM_PREFIX = "litellm:"


class LiteLLMEmbedder:
    """A remote embedder through ``litellm.embedding`` (``model`` in litellm's naming,
    e.g. ``"text-embedding-3-small"``; extra keyword arguments are passed on)."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        self.name = f"{LITELLM_PREFIX}{model}"

    def warm_up(self) -> None:
        """Import litellm now (seconds: memtap calls this in a background thread, so that
        the first query's embedding does not pay for it)."""
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm  # noqa: F401

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Call ``litellm.embedding`` once for all ``texts``."""
        self.warm_up()
        import litellm

        response = litellm.embedding(model=self.model, input=list(texts), **self.kwargs)
        rows = sorted(response.data, key=lambda d: d["index"] if isinstance(d, dict) else d.index)
        return [list(r["embedding"] if isinstance(r, dict) else r.embedding) for r in rows]


class LiteLLMEmbedderPlugin:
    """Core's default answer to ``memtap_embedder`` for ``litellm:<model>`` specs."""

    @hookimpl(trylast=True)
    def memtap_embedder(self, spec: str) -> Embedder | None:
        """A :class:`LiteLLMEmbedder` for ``litellm:<model>``."""
        if spec.startswith(LITELLM_PREFIX) and len(spec) > len(LITELLM_PREFIX):
            return LiteLLMEmbedder(spec[len(LITELLM_PREFIX) :])
        return None
