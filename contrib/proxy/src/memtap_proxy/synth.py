"""Answers made by the proxy itself (``mem:`` commands), in each protocol's own shape,
JSON or SSE, so the official SDKs parse them like a model's answer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from . import gemini

JSON = dict[str, Any]


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _data(obj: Any) -> bytes:
    return b"data: " + _dumps(obj) + b"\n\n"


def _named(name: str, obj: Any) -> bytes:
    return b"event: " + name.encode() + b"\n" + _data(obj)


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


# -- OpenAI Chat Completions ---------------------------------------------------------------


def chat_json(text: str, model: str) -> JSON:
    """A ``chat.completion`` answering ``text``."""
    return {
        "id": _id("chatcmpl-memtap"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def chat_sse(text: str, model: str, body: JSON) -> Iterator[bytes]:
    """``chat.completion.chunk`` events, then ``[DONE]`` (usage only if asked for)."""
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    base: JSON = {
        "id": _id("chatcmpl-memtap"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }

    def chunk(delta: JSON, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    yield chunk({"content": text})
    yield chunk({}, "stop")
    if usage:
        yield _data(
            {**base, "choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
        )
    yield b"data: [DONE]\n\n"


# -- OpenAI Responses ----------------------------------------------------------------------


def _responses_usage() -> JSON:
    return {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }


def _message_item(item_id: str, text: str | None, status: str) -> JSON:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _response(resp_id: str, model: str, status: str, output: list[JSON]) -> JSON:
    return {
        "id": resp_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _responses_usage() if status == "completed" else None,
    }


def responses_json(text: str, model: str) -> JSON:
    """A completed ``response`` answering ``text``."""
    return _response(_id("resp_memtap"), model, "completed", [_message_item(_id("msg_"), text, "completed")])


def responses_sse(text: str, model: str, body: JSON) -> Iterator[bytes]:
    """The Responses event sequence for one text message."""
    resp_id, item_id = _id("resp_memtap"), _id("msg_")
    seq = iter(range(1_000))
    part = {"type": "output_text", "text": "", "annotations": []}
    done_part = {**part, "text": text}

    def event(kind: str, fields: JSON) -> bytes:
        return _named(kind, {"type": kind, "sequence_number": next(seq), **fields})

    yield event("response.created", {"response": _response(resp_id, model, "in_progress", [])})
    yield event("response.in_progress", {"response": _response(resp_id, model, "in_progress", [])})
    yield event(
        "response.output_item.added", {"output_index": 0, "item": _message_item(item_id, None, "in_progress")}
    )
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    yield event("response.content_part.added", {**where, "part": part})
    yield event("response.output_text.delta", {**where, "delta": text, "logprobs": []})
    yield event("response.output_text.done", {**where, "text": text, "logprobs": []})
    yield event("response.content_part.done", {**where, "part": done_part})
    final_item = _message_item(item_id, text, "completed")
    yield event("response.output_item.done", {"output_index": 0, "item": final_item})
    yield event("response.completed", {"response": _response(resp_id, model, "completed", [final_item])})


# -- Anthropic Messages --------------------------------------------------------------------


def _anthropic_usage() -> JSON:
    return {"input_tokens": 0, "output_tokens": 0}


def anthropic_json(text: str, model: str) -> JSON:
    """A ``message`` answering ``text``."""
    return {
        "id": _id("msg_memtap"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(),
    }


def anthropic_sse(text: str, model: str, body: JSON) -> Iterator[bytes]:
    """The Messages event sequence for one text block."""
    start = {**anthropic_json("", model), "content": [], "stop_reason": None}

    def event(kind: str, fields: JSON) -> bytes:
        return _named(kind, {"type": kind, **fields})

    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta",
        {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 0}},
    )
    yield event("message_stop", {})


JsonMaker = Callable[[str, str], JSON]
SseMaker = Callable[[str, str, JSON], Iterator[bytes]]

#: Per protocol name: (JSON answer, SSE answer).
ANSWERS: dict[str, tuple[JsonMaker, SseMaker]] = {
    "openai.chat": (chat_json, chat_sse),
    "openai.responses": (responses_json, responses_sse),
    "anthropic.messages": (anthropic_json, anthropic_sse),
}


def answer(protocol: str, text: str, body: JSON) -> tuple[bytes, str, bool]:
    """``(bytes, content type, is_sse)`` answering ``text`` to a request ``body`` in
    ``protocol`` (streamed when the request asked to stream)."""
    make_json, make_sse = ANSWERS[protocol]
    model = str(body.get("model") or "memtap")
    if body.get("stream") is True:
        return b"".join(make_sse(text, model, body)), "text/event-stream; charset=utf-8", True
    return _dumps(make_json(text, model)), "application/json", False


def error_body(family: str, status: int, message: str) -> bytes:
    """An error in the family's own format (both SDK families can read it; Gemini's
    SDKs read Google's)."""
    if family == "gemini":
        return gemini.error_body(status, message)
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "request_too_large",
        502: "api_error",
    }
    kind = kinds.get(status, "api_error")
    if family == "anthropic":
        return _dumps({"type": "error", "error": {"type": kind, "message": message}})
    return _dumps({"error": {"message": message, "type": kind, "param": None, "code": kind}})
