"""Embedders: the port recall uses to turn text into vectors, and how one is chosen.

An embedder is any object with a ``name`` (which identifies its vector space: vectors
stored under one name are never compared with another's) and ``embed(texts)`` returning
one row of floats per text (a 2-D numpy array or a list of lists). Plugins offer embedders
through the ``memtap_embedder`` hook; core answers ``litellm:<model>`` itself with
:class:`LiteLLMEmbedder` (litellm is imported on first use only).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .errors import install_hint
from .hookspecs import hookimpl

if TYPE_CHECKING:
    from .plugins import PluginManager

log = logging.getLogger("memtap.embedding")

#: Environment variable naming the embedder (``default``, ``minilm``, ``litellm:<model>``,
#: ``off``).
EMBEDDER_ENV = "MEMTAP_EMBEDDER"
LITELLM_PREFIX = "litellm:"


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


def resolve_embedder(option: EmbedderOption, pm: PluginManager) -> Embedder | None:
    """The embedder ``option`` names: an :class:`Embedder` as it is; ``False`` / ``"off"``
    for none; a spec string asked of the ``memtap_embedder`` hook; ``None`` (or ``True``)
    for ``$MEMTAP_EMBEDDER``, else ``"default"`` (the local MiniLM when installed).

    An unknown explicit spec raises ``ValueError``; when the default is not available,
    recall is lexical only.
    """
    if option is False:
        return None
    if option is not None and option is not True and not isinstance(option, str):
        return option
    spec = option if isinstance(option, str) else os.environ.get(EMBEDDER_ENV, "default")
    if spec.strip().lower() in ("", "off", "none"):
        return None
    embedder: Embedder | None = pm.hook.memtap_embedder(spec=spec)
    if embedder is None and spec != "default":
        raise ValueError(
            f"no installed memtap plugin provides the embedder {spec!r}; install memtap-minilm "
            f"for 'minilm' ({install_hint('memtap-minilm')}), or use 'litellm:<model>' (needs "
            "`pip install litellm`)"
        )
    return embedder


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
    """Built-in answer to ``memtap_embedder`` for ``litellm:<model>`` specs."""

    @hookimpl(trylast=True)
    def memtap_embedder(self, spec: str) -> Embedder | None:
        """A :class:`LiteLLMEmbedder` for ``litellm:<model>``."""
        if spec.startswith(LITELLM_PREFIX) and len(spec) > len(LITELLM_PREFIX):
            return LiteLLMEmbedder(spec[len(LITELLM_PREFIX) :])
        return None
