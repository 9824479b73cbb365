"""``mem.register(chat_model)`` for LangChain chat models: find the SDK clients the model
wraps and register them through the provider plugins, so the model's calls are injected and
captured like the SDK's own."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from memtap.sdk import Patches, Tap, UnsupportedClientError

#: Where each supported chat model keeps its SDK clients (attribute names, in order).
CLIENT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "langchain_openai": ("root_client", "root_async_client"),
    "langchain_anthropic": ("_client", "_async_client"),
    "langchain_google_genai": ("client",),
    "langchain_litellm": ("client",),
    "langchain_community": ("client",),
}


def is_chat_model(obj: Any) -> bool:
    """A LangChain chat model instance (checked without importing LangChain)."""
    core = sys.modules.get("langchain_core.language_models.chat_models")
    base = getattr(core, "BaseChatModel", None) if core is not None else None
    return base is not None and not isinstance(obj, type) and isinstance(obj, base)


def wrapped_clients(model: Any) -> list[Any]:
    """The SDK clients (or SDK modules, for litellm) a chat model calls through."""
    package = type(model).__module__.split(".", 1)[0]
    found: list[Any] = []
    for name in CLIENT_ATTRIBUTES.get(package, ()):
        try:
            client = getattr(model, name, None)
        except Exception:  # a lazily built client that cannot be built (no key...)
            continue
        if client is not None and all(client is not c for c in found):
            found.append(client)
    return found


class ChatModelAdapter:
    """Registers the SDK clients inside a LangChain chat model."""

    provider = "langchain"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Register every wrapped SDK client the installed providers recognise."""
        inner = wrapped_clients(client)
        matched = [c for c in inner if tap.hook.memtap_match_client(client=c) is not None]
        if not matched:
            kinds = ", ".join(f"{type(c).__module__}.{type(c).__qualname__}" for c in inner) or "none found"
            raise UnsupportedClientError(
                f"{type(client).__qualname__} wraps SDK clients memtap has no provider plugin for "
                f"({kinds}). Install the provider plugin for its SDK (e.g. `pip install memtap-openai` "
                f"for ChatOpenAI, `memtap-anthropic` for ChatAnthropic), or use MemoryMiddleware."
            )
        registered = Patches()
        with registered.all_or_nothing():
            for inner_client in matched:
                registered.on_restore(tap.register_client(inner_client))
        return registered.restore
