"""The Anthropic Messages wire protocol (``POST /v1/messages``), also used by ``beta.messages``.

The format itself (reading requests, responses and streams, writing history, placing
blocks) is core's :mod:`memtap.formats.anthropic_messages`, shared with Bedrock's Anthropic bodies so
that a Claude turn is stored the same whichever way it travelled.
"""

from __future__ import annotations

from memtap.sdk import THINKING_TYPES, AnthropicFormatProtocol, MessagesStreamAccumulator
from memtap.sdk import anthropic_tool_arguments as tool_arguments
from memtap.sdk import anthropic_uses_prompt_cache as uses_prompt_cache
from memtap.sdk import is_anthropic_tail_turn as is_tail_turn
from memtap.sdk import read_anthropic_message as read_message
from memtap.sdk import read_anthropic_usage as read_usage
from memtap.sdk import write_anthropic_history as write_history

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
