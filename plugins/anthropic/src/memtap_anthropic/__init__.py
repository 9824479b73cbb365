"""memtap provider plugin for the anthropic SDK: ``messages`` and ``beta.messages``
(``create``, ``parse``, the ``stream(...)`` helper), sync and async, streaming and not
(entry point ``anthropic`` in group ``memtap``)."""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import MESSAGES, AnthropicAdapter, is_anthropic_client
from .messages import AnthropicMessagesProtocol

__all__ = ["AnthropicAdapter", "AnthropicMessagesProtocol"]


@hookimpl
def memtap_match_client(client: Any) -> AnthropicAdapter | None:
    """Recognise ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic`` (and subclasses)."""
    return AnthropicAdapter() if is_anthropic_client(client) else None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """Anthropic Messages."""
    return [MESSAGES]
