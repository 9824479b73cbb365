"""LangChain messages as memtap's canonical messages."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from memtap.sdk import Message, ToolCall, content_text


def to_message(message: BaseMessage) -> Message | None:
    """One LangChain message as a canonical message (``None`` for system messages)."""
    text = content_text(message.content)
    if isinstance(message, HumanMessage):
        return Message(role="user", content=text)
    if isinstance(message, AIMessage):
        calls = [
            ToolCall(id=str(c.get("id") or ""), name=c["name"], arguments=json.dumps(c.get("args") or {}))
            for c in message.tool_calls
        ]
        return Message(role="assistant", content=text, tool_calls=calls)
    if isinstance(message, ToolMessage):
        return Message(role="tool", content=text, tool_call_id=message.tool_call_id)
    return None


def to_messages(messages: Iterable[BaseMessage]) -> list[Message]:
    """Every non-system message, converted."""
    return [m for m in (to_message(x) for x in messages) if m is not None]


def latest_user_text(messages: Sequence[Any]) -> str | None:
    """The text of the last human message, if any."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return content_text(message.content)
    return None


def final_turn(messages: Sequence[BaseMessage]) -> tuple[list[Message], list[Message]]:
    """The last human message (input) and everything the agent said after it (output)."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return to_messages(messages[index : index + 1]), to_messages(messages[index + 1 :])
    return [], []
