"""The memtap plugin of memtap-langchain (entry point ``langchain``): matches LangChain
chat models without importing LangChain."""

from __future__ import annotations

from typing import Any

from memtap import hookimpl

from .models import ChatModelAdapter, is_chat_model


@hookimpl(trylast=True)
def memtap_match_client(client: Any) -> ChatModelAdapter | None:
    """Recognise LangChain chat models (after the SDK providers had their say)."""
    return ChatModelAdapter() if is_chat_model(client) else None
