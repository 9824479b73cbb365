"""memtap provider plugin for google-genai: ``models.generate_content`` and
``generate_content_stream``, their ``aio`` forms, and chats (entry point ``google`` in
group ``memtap``)."""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import GENERATE, GoogleAdapter, is_google_client
from .arraystream import JSONArrayStream
from .generate import GenerateContentProtocol

__all__ = ["GenerateContentProtocol", "GoogleAdapter", "JSONArrayStream"]


@hookimpl
def memtap_match_client(client: Any) -> GoogleAdapter | None:
    """Recognise ``google.genai.Client`` and its ``AsyncClient`` (``client.aio``)."""
    return GoogleAdapter() if is_google_client(client) else None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """Gemini ``generateContent``."""
    return [GENERATE]
