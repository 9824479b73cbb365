"""The OpenAI Chat Completions wire protocol (``POST /v1/chat/completions``).

The message format itself (messages, usage, choices, stream chunks) is read and written by
:mod:`memtap.formats.openai_chat`, shared with every protocol that speaks it; what is OpenAI's own
here is how a request says it relies on the prompt cache, and so where per-turn blocks go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memtap.sdk import (
    CHAT_CODEC,
    SYSTEM_ROLES,
    ChatFormatProtocol,
    ChatStreamAccumulator,
    InjectionPlan,
    layout_messages,
)
from memtap.sdk import read_chat_message as read_message
from memtap.sdk import read_chat_usage as read_usage
from memtap.sdk import write_chat_message as write_message

__all__ = [
    "SYSTEM_ROLES",
    "ChatCompletionsProtocol",
    "ChatStreamAccumulator",
    "read_message",
    "read_usage",
    "uses_prompt_cache",
    "write_message",
]


class ChatCompletionsProtocol(ChatFormatProtocol):
    """OpenAI Chat Completions, also spoken by many OpenAI-compatible servers."""

    name = "openai.chat"
    provider = "openai"
    operation = "chat"

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """The app's leading system messages (a known agent's anchored blocks inside), then
        ``session_init`` blocks, the history, ``per_turn`` blocks, then the rest. With a
        prompt cache key (:func:`uses_prompt_cache`) the per-turn blocks are one system
        message at the very end instead, after everything the cache can hold."""
        out = dict(body)
        out["messages"] = layout_messages(
            list(body.get("messages") or ()), plan, CHAT_CODEC, cached=uses_prompt_cache(body)
        )
        return out


def uses_prompt_cache(body: Mapping[str, Any]) -> bool:
    """Whether an OpenAI request says it relies on the (automatic) prompt cache: it names a
    ``prompt_cache_key`` or a ``prompt_cache_retention``, as agents such as Codex do. Then
    text that changes every turn must come after the conversation, not before it."""
    return "prompt_cache_key" in body or "prompt_cache_retention" in body
