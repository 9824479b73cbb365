"""memtap provider plugin for the Acme SDK with its wire format written out in full: the
template to copy for a provider whose format memtap does not know (entry point
``acme_wire`` in group ``memtap``). For an OpenAI-compatible SDK, start from
``plugins/_template`` instead.

memtap calls the two hooks below: ``memtap_match_client`` when an app registers a client,
``memtap_wire_protocols`` to learn the request/response formats this plugin speaks.
"""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import PROTOCOL, AcmeAdapter, is_acme_client
from .protocol import AcmeChatProtocol

__all__ = ["AcmeAdapter", "AcmeChatProtocol"]


@hookimpl
def memtap_match_client(client: Any) -> AcmeAdapter | None:
    """Recognise Acme clients (``None`` for anything else: another plugin may know it)."""
    return AcmeAdapter() if is_acme_client(client) else None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """The Acme chat protocol."""
    return [PROTOCOL]
