"""The Anthropic Messages wire protocol (``POST /v1/messages``), also used by ``beta.messages``.

The format itself (reading requests, responses and streams, writing history, placing
blocks) is core's :mod:`memtap.anthropic_format`, shared with Bedrock's Anthropic bodies so
that a Claude turn is stored the same whichever way it travelled.
"""

from __future__ import annotations

from memtap.anthropic_format import (
    THINKING_TYPES,
    AnthropicFormatProtocol,
    MessagesStreamAccumulator,
    is_tail_turn,
    read_message,
    read_usage,
    tool_arguments,
    uses_prompt_cache,
    write_history,
)

__all__ = [
    "THINKING_TYPES",
    "AnthropicMessagesProtocol",
    "MessagesStreamAccumulator",
    "is_tail_turn",
    "read_message",
    "read_usage",
    "tool_arguments",
    "uses_prompt_cache",
    "write_history",
]


class AnthropicMessagesProtocol(AnthropicFormatProtocol):
    """Anthropic Messages: ``system`` apart from ``messages``, content as blocks."""

    name = "anthropic.messages"
    provider = "anthropic"
