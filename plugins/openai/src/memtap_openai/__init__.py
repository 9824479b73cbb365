"""memtap provider plugin for the openai SDK: Chat Completions and Responses, sync and
async, streaming and not (entry point ``openai`` in group ``memtap``)."""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import CHAT, RESPONSES, OpenAIAdapter, is_openai_client
from .chat import ChatCompletionsProtocol
from .responses import ResponsesProtocol

__all__ = ["ChatCompletionsProtocol", "OpenAIAdapter", "ResponsesProtocol"]


@hookimpl
def memtap_match_client(client: Any) -> OpenAIAdapter | None:
    """Recognise ``openai.OpenAI`` / ``openai.AsyncOpenAI`` (and subclasses such as Azure)."""
    return OpenAIAdapter() if is_openai_client(client) else None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """Chat Completions and Responses."""
    return [CHAT, RESPONSES]
