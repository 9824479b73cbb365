"""memtap provider plugin for xAI's ``xai-sdk`` (gRPC): ``client.chat.create(...)`` then
``.sample()`` / ``.stream()`` (and ``parse``, batch variants), with ``xai_sdk.Client`` and
``xai_sdk.AsyncClient`` (entry point ``xai`` in group ``memtap``)."""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import CHAT, XaiAdapter, is_xai_client
from .protocol import XaiChatProtocol

__all__ = ["XaiAdapter", "XaiChatProtocol"]


@hookimpl
def memtap_match_client(client: Any) -> XaiAdapter | None:
    """Recognise ``xai_sdk.Client`` and ``xai_sdk.AsyncClient``."""
    return XaiAdapter() if is_xai_client(client) else None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """``xai.chat``."""
    return [CHAT]
