"""Message helpers of the conversation and history tests."""

from __future__ import annotations

from collections.abc import Sequence

from memtap.protocol.model import Message, ToolCall


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str = "", calls: Sequence[str] = ()) -> Message:
    return Message(
        role="assistant",
        content=text,
        tool_calls=[ToolCall(id=c, name="lookup", arguments='{"q": 1}') for c in calls],
    )


def tool(call_id: str, text: str = "result") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id)


def conversation(turns: int) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out += [user(f"question {i}"), assistant(f"answer {i}")]
    return out
