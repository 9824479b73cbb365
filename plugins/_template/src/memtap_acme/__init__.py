"""memtap provider plugin for the Acme SDK (the template to copy; entry point ``acme`` in
group ``memtap``, see docs/plugin-authoring.md).

Acme's client speaks OpenAI Chat Completions, so memtap's chat format reads and edits its
requests, responses and streams. What is Acme's own: the protocol's name, how to recognise
an Acme client, and which of its methods sends a chat request.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from memtap import hookimpl
from memtap.sdk import ChatFormatProtocol, Patches, Tap, WireProtocol, tracked_kwargs

__all__ = ["AcmeAdapter", "AcmeChatProtocol"]


class AcmeChatProtocol(ChatFormatProtocol):
    """Acme chat completions: the OpenAI chat format under Acme's name."""

    name = "acme.chat"  # unique among the wire protocols of installed plugins
    provider = "acme"  # stored with every exchange (the span's gen_ai.provider.name)


PROTOCOL = AcmeChatProtocol()


class AcmeAdapter:
    """Taps one Acme client instance (never its class: other clients stay untouched)."""

    provider = "acme"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Wrap the client's ``chat``; return the function that undoes exactly that."""
        patches = Patches()
        patches.wrap(client, "chat", lambda chat: tracked_kwargs(chat, tap, PROTOCOL, what="Acme"))
        return patches.restore


@hookimpl
def memtap_match_client(client: Any) -> AcmeAdapter | None:
    """An adapter for an Acme client; ``None`` for anything else (another plugin may know it)."""
    sdk = sys.modules.get("acme_sdk")  # never import the SDK just to look: if the app has
    # not imported it, none of its clients exists
    classes = [getattr(sdk, name, None) for name in ("AcmeClient", "AsyncAcmeClient")]
    if any(isinstance(cls, type) and isinstance(client, cls) for cls in classes):
        return AcmeAdapter()
    return None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """The wire protocols this plugin speaks."""
    return [PROTOCOL]
