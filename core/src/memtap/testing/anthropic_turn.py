"""One Claude turn in the Anthropic Messages format, and exactly how memtap stores it.

Every transport that carries Anthropic Messages bodies (the anthropic SDK, Bedrock's
``invoke_model``, the proxy...) reads them with one codec (:mod:`memtap.formats.anthropic_messages`),
so this turn must be stored as :data:`STORED` whichever way it travelled. The request holds
an earlier assistant message with everything that was once read differently: a signed
``thinking`` block, an answer split over two text blocks, a ``tool_use`` with non-ASCII
input; the response has the same, streamed as :data:`RESPONSE_EVENTS`.
"""

from __future__ import annotations

import json
from typing import Any

from memtap.protocol.model import Message, ToolCall, Usage

__all__ = [
    "MODEL",
    "REQUEST",
    "RESPONSE",
    "RESPONSE_EVENTS",
    "STORED",
    "STORED_SYSTEM",
    "STORED_USAGE",
    "sse",
]

MODEL = "claude-sonnet-4-5"

#: The app's request (``model`` apart: Bedrock carries it as ``modelId``).
REQUEST: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 1024,
    "system": [{"type": "text", "text": "You answer briefly."}, {"type": "text", "text": "Use tools."}],
    "thinking": {"type": "enabled", "budget_tokens": 512},
    "messages": [
        {"role": "user", "content": "Wie ist das Wetter in Zürich?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "The user wants Zürich's weather.", "signature": "c2lnLTE="},
                {"type": "text", "text": "Ich sehe "},
                {"type": "text", "text": "nach."},
                {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Zürich"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "18°C"}],
                },
                {"type": "text", "text": "Und morgen?"},
            ],
        },
    ],
}

#: The model's answer (a complete ``message`` object).
RESPONSE: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "thinking", "thinking": "Tomorrow needs the forecast.", "signature": "c2lnLTI="},
        {"type": "text", "text": "Heute 18°C, "},
        {"type": "text", "text": "morgen frage ich nach."},
        {"type": "tool_use", "id": "toolu_02", "name": "forecast", "input": {"city": "Zürich", "days": 1}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 40,
        "output_tokens": 30,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 5,
    },
}


def _events() -> list[dict[str, Any]]:
    start = {
        **RESPONSE,
        "content": [],
        "stop_reason": None,
        "usage": {**RESPONSE["usage"], "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(RESPONSE["content"]):
        kind = block["type"]
        if kind == "thinking":
            opening: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            opening = {**block, "input": {}}
            raw = json.dumps(block["input"])  # what the API streams: ASCII-escaped, in pieces
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[i : i + 7]} for i in range(0, len(raw), 7)
            ]
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": RESPONSE["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": RESPONSE["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


#: :data:`RESPONSE` as the event stream a streamed request gets.
RESPONSE_EVENTS: list[dict[str, Any]] = _events()


def sse(events: list[dict[str, Any]]) -> bytes:
    """Events as Anthropic's server-sent events body."""
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


#: How memtap stores the request's messages and the response, in order.
STORED: tuple[Message, ...] = (
    Message(role="user", content="Wie ist das Wetter in Zürich?"),
    Message(
        role="assistant",
        content="Ich sehe nach.",
        tool_calls=(ToolCall(id="toolu_01", name="weather", arguments='{"city": "Zürich"}'),),
    ),
    Message(role="tool", content="18°C", tool_call_id="toolu_01"),
    Message(role="user", content="Und morgen?"),
    Message(
        role="assistant",
        content="Heute 18°C, morgen frage ich nach.",
        tool_calls=(ToolCall(id="toolu_02", name="forecast", arguments='{"city": "Zürich", "days": 1}'),),
    ),
)

#: The request's system text as stored (its blocks apart by a blank line).
STORED_SYSTEM = "You answer briefly.\n\nUse tools."

#: The response's usage as stored: every input token, cache reads and writes included.
STORED_USAGE = Usage(input_tokens=145, output_tokens=30, cached_input_tokens=100)
