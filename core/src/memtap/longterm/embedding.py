"""Embedders: the port recall uses to turn text into vectors, and how one is chosen.

An embedder is any object with a ``name`` (which identifies its vector space: vectors
stored under one name are never compared with another's) and ``embed(texts)`` returning
one row of floats per text (a 2-D numpy array or a list of lists). Plugins offer embedders
through the ``memtap_embedder`` hook; core answers ``litellm:<model>`` itself with
:class:`LiteLLMEmbedder` (litellm is imported on first use only).

The port is :mod:`memtap.protocol.embedder`, the litellm adapter :mod:`memtap.longterm.litellm_embedder`, its
default plugin beside it (``litellm-embedder``); this module chooses the embedder.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from memtap.errors import install_hint
from memtap.longterm.litellm_embedder import LITELLM_PREFIX, LiteLLMEmbedder
from memtap.protocol.embedder import Embedder, EmbedderOption

if TYPE_CHECKING:
    from memtap.plugins import PluginManager

__all__ = [
    "EMBEDDER_ENV",
    "LITELLM_PREFIX",
    "Embedder",
    "EmbedderOption",
    "LiteLLMEmbedder",
    "resolve_embedder",
]

log = logging.getLogger("memtap.longterm.embedding")

#: Environment variable naming the embedder (``default``, ``minilm``, ``litellm:<model>``,
#: ``off``).
EMBEDDER_ENV = "MEMTAP_EMBEDDER"


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
