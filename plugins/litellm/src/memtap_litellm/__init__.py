"""memtap provider plugin for litellm: ``litellm.completion`` / ``litellm.acompletion``
(``mem.register(litellm)``) and ``litellm.Router`` instances, sync and async, streaming and
not (entry point ``litellm`` in group ``memtap``).

litellm is never imported by this plugin: a client is recognised only when the app has
imported litellm itself.
"""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import CHAT, LiteLLMModuleAdapter, LiteLLMRouterAdapter, is_litellm_module, is_router
from .protocol import LiteLLMChatProtocol

__all__ = ["LiteLLMChatProtocol", "LiteLLMModuleAdapter", "LiteLLMRouterAdapter"]


@hookimpl
def memtap_match_client(client: Any) -> LiteLLMModuleAdapter | LiteLLMRouterAdapter | None:
    """Recognise the ``litellm`` module and ``litellm.Router`` instances."""
    if is_litellm_module(client):
        return LiteLLMModuleAdapter()
    if is_router(client):
        return LiteLLMRouterAdapter()
    return None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """``litellm.chat`` (OpenAI-shaped ``completion`` arguments and responses)."""
    return [CHAT]
