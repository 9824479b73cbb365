"""Registering openai SDK clients (``OpenAI``, ``AsyncOpenAI``, ``AzureOpenAI``...)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from memtap.sdk import StainlessInstaller, Tap, Target

from .chat import ChatCompletionsProtocol
from .responses import ResponsesProtocol

CHAT = ChatCompletionsProtocol()
RESPONSES = ResponsesProtocol()

#: The methods memtap patches; the SDK's ``.stream(...)`` helpers call ``create`` and are
#: covered through it.
TARGETS = (
    Target(("chat", "completions"), "create", CHAT),
    Target(("chat", "completions"), "parse", CHAT),
    Target(("responses",), "create", RESPONSES),
    Target(("responses",), "parse", RESPONSES),
)


def is_openai_client(client: Any) -> bool:
    """Whether ``client`` is an openai SDK client (checked without importing openai)."""
    openai = sys.modules.get("openai")
    if openai is None or isinstance(client, type):
        return False
    bases = tuple(
        cls for cls in (getattr(openai, "OpenAI", None), getattr(openai, "AsyncOpenAI", None)) if cls
    )
    return bool(bases) and isinstance(client, bases)


class OpenAIAdapter:
    """Patches an openai client instance through its Stainless structure."""

    provider = "openai"

    def __init__(self) -> None:
        self._installer = StainlessInstaller(TARGETS, event_filter=CHAT.caller_event)

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Patch ``client``; return the restore function."""
        return self._installer.install(client, tap)
