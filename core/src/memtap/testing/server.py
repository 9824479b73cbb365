"""A local scripted model server for memtap's demo, tests and benchmarks.

``ScriptedModelServer`` speaks four real wire protocols closely enough for the official SDKs
to parse its answers:

* OpenAI Chat Completions (``POST /v1/chat/completions``), JSON and SSE;
* OpenAI Responses (``POST /v1/responses``), JSON and SSE;
* Anthropic Messages (``POST /v1/messages``), JSON and SSE, plus ``/v1/messages/count_tokens``;
* Gemini (``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``),
  plus ``:countTokens`` and the model list (``GET /v1beta/models``, ``GET /v1beta/models/{model}``;
  ``/v1/models`` too when the request carries Google's ``x-goog-api-key``).

Replies are queued with :meth:`ScriptedModelServer.script` and consumed first-in first-out by
whichever protocol is called next. With an empty queue the server echoes the last user text as
``"You said: <text>"``, which keeps demos and tests deterministic.

Only the standard library is used, so the server costs nothing to import and adds as little
latency as possible to benchmarks.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json as _json
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any, ClassVar

from memtap.testing.validation import Rejection, check_request

__all__ = ["RecordedRequest", "Reply", "ScriptedModelServer", "ToolCallSpec"]

JSONObject = dict[str, Any]


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool (function) call made by the scripted model.

    ``arguments`` is JSON text, exactly as OpenAI carries it; Anthropic and Gemini receive it
    parsed into an object (``{}`` if it is not a JSON object). ``id`` defaults to a generated,
    protocol-typical identifier (``call_...``, ``toolu_...``).
    """

    name: str
    arguments: str = "{}"
    id: str | None = None


_Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Reply:
    """What the scripted model answers to one request.

    Attributes:
        text: Assistant text; may be empty when ``tool_calls`` are given.
        tool_calls: Tool calls to make, in order (a list is converted at runtime).
        input_tokens: Reported prompt/input token count.
        output_tokens: Reported completion/output token count.
        finish_reason: Overrides the protocol's default finish reason (``stop``/``tool_calls``
            for OpenAI Chat, ``end_turn``/``tool_use`` for Anthropic, ``STOP`` for Gemini).
            For OpenAI Responses, ``length``/``max_tokens``/``MAX_TOKENS``/
            ``max_output_tokens``/``content_filter`` make the response ``incomplete``.
        chunks: How many pieces text and tool arguments are split into when streamed.
        status: A non-200 status answers with a JSON error body in the protocol's error format
            (``text``, if set, becomes the error message).
        delay: Seconds to sleep before the first byte of the response.
        truncate_stream_after: Close the connection after this many SSE events (pieces of a
            Gemini JSON-array stream), without the stream terminator (for bad-input tests).
        raw_body: Send exactly these bytes as the body (with ``status``) instead.
        thinking: The model's reasoning, shown before the answer: an Anthropic ``thinking``
            block (with a signature), an OpenAI Responses ``reasoning`` item (a summary and
            encrypted content); the other protocols leave it out.
        headers: Extra response headers, sent after the server's own in this order and
            spelling (request ids, rate limits: what a proxy must pass on unchanged).

    """

    text: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    input_tokens: int = 11
    output_tokens: int = 7
    finish_reason: str | None = None
    chunks: int = 3
    status: int = 200
    delay: float = 0.0
    truncate_stream_after: int | None = None
    raw_body: bytes | None = None
    thinking: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        object.__setattr__(self, "headers", tuple(tuple(h) for h in self.headers))


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as the server received it.

    ``headers`` has lower-cased names; ``query`` is the raw query string without ``?``.
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON, or ``None`` if it is empty or not valid JSON."""
        try:
            return _json.loads(self.body)
        except ValueError:
            return None


@dataclass(frozen=True)
class _Call:
    """Everything a protocol needs to render one reply."""

    reply: Reply
    body: JSONObject
    model: str
    ident: int
    created: int


# ---------------------------------------------------------------------------- helpers


def _dumps(obj: object) -> bytes:
    return _json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _pieces(text: str, count: int) -> list[str]:
    """Split ``text`` into at most ``count`` non-empty, nearly equal pieces."""
    if not text:
        return []
    size = -(-len(text) // max(1, count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _args_object(arguments: str) -> JSONObject:
    try:
        parsed = _json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _join_text(content: object, part_types: frozenset[str]) -> str:
    """Text of a message's content: a plain string, or its text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") in part_types and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)


def _last_user_text(messages: object, part_types: frozenset[str]) -> str:
    """Text of the last user message that carries any (tool-result-only turns are skipped)."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            text = _join_text(message.get("content"), part_types)
            if text:
                return text
    return ""


def _count_words(value: object) -> int:
    """Estimate tokens crudely but deterministically: whitespace-separated words in all text."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_count_words(item) for item in value)
    if isinstance(value, dict):
        return sum(_count_words(value.get(key)) for key in ("text", "content", "system"))
    return 0


def _data_event(payload: object) -> bytes:
    return b"data: " + _dumps(payload) + b"\n\n"


def _named_event(name: str, payload: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _dumps(payload) + b"\n\n"


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


# ---------------------------------------------------------------------------- protocols


class _Wire:
    """One wire protocol: how to read the user's text and render replies and errors."""

    stop_reason: ClassVar[str] = "stop"
    tool_reason: ClassVar[str] = "tool_calls"

    def finish(self, reply: Reply) -> str:
        if reply.finish_reason is not None:
            return reply.finish_reason
        return self.tool_reason if reply.tool_calls else self.stop_reason

    def user_text(self, body: JSONObject) -> str:
        raise NotImplementedError

    def render(self, call: _Call) -> object:
        raise NotImplementedError

    def render_array(self, call: _Call) -> object:
        return [self.render(call)]

    def events(self, call: _Call) -> Iterator[bytes]:
        raise NotImplementedError

    def error(self, status: int, message: str) -> JSONObject:
        return {"error": {"message": message, "type": _error_type(status), "param": None, "code": None}}


_CHAT_PARTS = frozenset({"text"})
_RESPONSES_PARTS = frozenset({"input_text", "text"})


class _OpenAIChat(_Wire):
    """OpenAI Chat Completions."""

    def user_text(self, body: JSONObject) -> str:
        return _last_user_text(body.get("messages"), _CHAT_PARTS)

    @staticmethod
    def _call_id(call: _Call, index: int, spec: ToolCallSpec) -> str:
        return spec.id or f"call_scripted{call.ident}_{index}"

    @staticmethod
    def _usage(reply: Reply) -> JSONObject:
        return {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }

    def render(self, call: _Call) -> JSONObject:
        reply = call.reply
        message: JSONObject = {
            "role": "assistant",
            "content": reply.text or (None if reply.tool_calls else ""),
            "refusal": None,
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": self._call_id(call, index, spec),
                    "type": "function",
                    "function": {"name": spec.name, "arguments": spec.arguments},
                }
                for index, spec in enumerate(reply.tool_calls)
            ]
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": self.finish(reply),
        }
        return {
            "id": f"chatcmpl-scripted{call.ident}",
            "object": "chat.completion",
            "created": call.created,
            "model": call.model,
            "choices": [choice],
            "usage": self._usage(reply),
            "system_fingerprint": None,
        }

    def events(self, call: _Call) -> Iterator[bytes]:
        reply = call.reply
        options = call.body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        base: JSONObject = {
            "id": f"chatcmpl-scripted{call.ident}",
            "object": "chat.completion.chunk",
            "created": call.created,
            "model": call.model,
            "system_fingerprint": None,
        }
        if include_usage:
            base["usage"] = None

        def chunk(delta: JSONObject, finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return _data_event({**base, "choices": [choice]})

        yield chunk({"role": "assistant", "content": "" if reply.text else None})
        for piece in _pieces(reply.text, reply.chunks):
            yield chunk({"content": piece})
        for index, spec in enumerate(reply.tool_calls):
            yield from self._tool_call_chunks(chunk, call, index, spec)
        yield chunk({}, self.finish(reply))
        if include_usage:
            yield _data_event({**base, "choices": [], "usage": self._usage(reply)})
        yield b"data: [DONE]\n\n"

    def _tool_call_chunks(
        self, chunk: Callable[[JSONObject], bytes], call: _Call, index: int, spec: ToolCallSpec
    ) -> Iterator[bytes]:
        head = {
            "index": index,
            "id": self._call_id(call, index, spec),
            "type": "function",
            "function": {"name": spec.name, "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        for piece in _pieces(spec.arguments, call.reply.chunks):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})


# Finish reasons that make a Responses API answer "incomplete", and the reason reported.
_INCOMPLETE_REASONS = {
    "length": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "MAX_TOKENS": "max_output_tokens",
    "max_output_tokens": "max_output_tokens",
    "content_filter": "content_filter",
}


class _OpenAIResponses(_Wire):
    """OpenAI Responses."""

    def user_text(self, body: JSONObject) -> str:
        given = body.get("input")
        if isinstance(given, str):
            return given
        return _last_user_text(given, _RESPONSES_PARTS)

    @staticmethod
    def _usage(reply: Reply) -> JSONObject:
        return {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }

    @staticmethod
    def _message_item(call: _Call, status: str, text: str | None) -> JSONObject:
        content = [] if text is None else [_OpenAIResponses._text_part(text)]
        return {
            "id": f"msg_scripted{call.ident}",
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    @staticmethod
    def _text_part(text: str) -> JSONObject:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    @staticmethod
    def _function_item(call: _Call, index: int, spec: ToolCallSpec, status: str) -> JSONObject:
        return {
            "id": f"fc_scripted{call.ident}_{index}",
            "type": "function_call",
            "status": status,
            "call_id": spec.id or f"call_scripted{call.ident}_{index}",
            "name": spec.name,
            "arguments": spec.arguments if status == "completed" else "",
        }

    def _items(self, call: _Call) -> list[JSONObject]:
        reply = call.reply
        items = [_reasoning_item(call, "completed")] if reply.thinking else []
        if reply.text or not reply.tool_calls:
            items.append(self._message_item(call, "completed", reply.text))
        for index, spec in enumerate(reply.tool_calls):
            items.append(self._function_item(call, index, spec, "completed"))
        return items

    def _response(self, call: _Call, status: str, output: list[JSONObject], final: bool) -> JSONObject:
        reason = _INCOMPLETE_REASONS.get(call.reply.finish_reason or "")
        body = call.body
        return {
            "id": f"resp_scripted{call.ident}",
            "object": "response",
            "created_at": call.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": reason} if final and reason else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": call.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": self._usage(call.reply) if final else None,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    def _final_status(self, reply: Reply) -> str:
        return "incomplete" if reply.finish_reason in _INCOMPLETE_REASONS else "completed"

    def render(self, call: _Call) -> JSONObject:
        return self._response(call, self._final_status(call.reply), self._items(call), True)

    def events(self, call: _Call) -> Iterator[bytes]:
        sequence = itertools.count()

        def event(kind: str, fields: JSONObject) -> bytes:
            return _named_event(kind, {"type": kind, "sequence_number": next(sequence), **fields})

        pending = self._response(call, "in_progress", [], False)
        yield event("response.created", {"response": pending})
        yield event("response.in_progress", {"response": pending})
        reply = call.reply
        index = 0
        if reply.thinking:
            yield from _reasoning_events(event, call, index)
            index += 1
        if reply.text or not reply.tool_calls:
            yield from self._message_events(event, call, index)
            index += 1
        for tool_index, spec in enumerate(reply.tool_calls):
            yield from self._function_events(event, call, index + tool_index, tool_index, spec)
        status = self._final_status(reply)
        final = self._response(call, status, self._items(call), True)
        yield event(f"response.{status}", {"response": final})

    def _message_events(
        self, event: Callable[[str, JSONObject], bytes], call: _Call, index: int
    ) -> Iterator[bytes]:
        text = call.reply.text
        item_id = f"msg_scripted{call.ident}"
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        added = self._message_item(call, "in_progress", None)
        yield event("response.output_item.added", {"output_index": index, "item": added})
        yield event("response.content_part.added", {**where, "part": self._text_part("")})
        for piece in _pieces(text, call.reply.chunks):
            yield event("response.output_text.delta", {**where, "delta": piece, "logprobs": []})
        yield event("response.output_text.done", {**where, "text": text, "logprobs": []})
        yield event("response.content_part.done", {**where, "part": self._text_part(text)})
        done = self._message_item(call, "completed", text)
        yield event("response.output_item.done", {"output_index": index, "item": done})

    def _function_events(
        self,
        event: Callable[[str, JSONObject], bytes],
        call: _Call,
        index: int,
        tool_index: int,
        spec: ToolCallSpec,
    ) -> Iterator[bytes]:
        added = self._function_item(call, tool_index, spec, "in_progress")
        where = {"item_id": added["id"], "output_index": index}
        yield event("response.output_item.added", {"output_index": index, "item": added})
        for piece in _pieces(spec.arguments, call.reply.chunks):
            yield event("response.function_call_arguments.delta", {**where, "delta": piece})
        done_fields = {**where, "name": spec.name, "arguments": spec.arguments}
        yield event("response.function_call_arguments.done", done_fields)
        done = self._function_item(call, tool_index, spec, "completed")
        yield event("response.output_item.done", {"output_index": index, "item": done})


class _Anthropic(_Wire):
    """Anthropic Messages."""

    stop_reason = "end_turn"
    tool_reason = "tool_use"

    def user_text(self, body: JSONObject) -> str:
        return _last_user_text(body.get("messages"), _CHAT_PARTS)

    def error(self, status: int, message: str) -> JSONObject:
        return {"type": "error", "error": {"type": _error_type(status), "message": message}}

    @staticmethod
    def _tool_id(call: _Call, index: int, spec: ToolCallSpec) -> str:
        return spec.id or f"toolu_scripted{call.ident}_{index}"

    def _blocks(self, call: _Call) -> list[JSONObject]:
        reply = call.reply
        blocks: list[JSONObject] = [_thinking_block(call)] if reply.thinking else []
        if reply.text or not reply.tool_calls:
            blocks.append({"type": "text", "text": reply.text})
        for index, spec in enumerate(reply.tool_calls):
            tool_id = self._tool_id(call, index, spec)
            input_ = _args_object(spec.arguments)
            blocks.append({"type": "tool_use", "id": tool_id, "name": spec.name, "input": input_})
        return blocks

    def _message(self, call: _Call, content: list[JSONObject], final: bool) -> JSONObject:
        reply = call.reply
        return {
            "id": f"msg_scripted{call.ident}",
            "type": "message",
            "role": "assistant",
            "model": call.model,
            "content": content,
            "stop_reason": self.finish(reply) if final else None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.input_tokens,
                "output_tokens": reply.output_tokens if final else 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def render(self, call: _Call) -> JSONObject:
        return self._message(call, self._blocks(call), True)

    def events(self, call: _Call) -> Iterator[bytes]:
        reply = call.reply
        start = {"type": "message_start", "message": self._message(call, [], False)}
        yield _named_event("message_start", start)
        yield _named_event("ping", {"type": "ping"})
        for index, block in enumerate(self._blocks(call)):
            yield from self._block_events(index, block, reply.chunks)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self.finish(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        }
        yield _named_event("message_delta", delta)
        yield _named_event("message_stop", {"type": "message_stop"})

    def _block_events(self, index: int, block: JSONObject, chunks: int) -> Iterator[bytes]:
        if block["type"] == "thinking":
            yield from _thinking_events(index, block, chunks)
            return
        if block["type"] == "text":
            opening: JSONObject = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], chunks)]
        else:
            opening = {**block, "input": {}}
            arguments = _json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(arguments, chunks)]
        start = {"type": "content_block_start", "index": index, "content_block": opening}
        yield _named_event("content_block_start", start)
        for delta in deltas:
            payload = {"type": "content_block_delta", "index": index, "delta": delta}
            yield _named_event("content_block_delta", payload)
        yield _named_event("content_block_stop", {"type": "content_block_stop", "index": index})


# ---------------------------------------------------------------------------- reasoning


def _signature(call: _Call) -> str:
    """An opaque signature for a scripted reasoning (base64, like the real ones)."""
    return base64.b64encode(f"scripted-signature-{call.ident}".encode()).decode()


def _thinking_block(call: _Call) -> JSONObject:
    """An Anthropic ``thinking`` block for the reply's reasoning."""
    return {"type": "thinking", "thinking": call.reply.thinking, "signature": _signature(call)}


def _thinking_events(index: int, block: JSONObject, chunks: int) -> Iterator[bytes]:
    """A ``thinking`` block as Anthropic streams it: thinking deltas, then its signature."""
    opening = {"type": "thinking", "thinking": "", "signature": ""}
    yield _named_event(
        "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
    )
    for piece in _pieces(block["thinking"], chunks):
        delta = {"type": "thinking_delta", "thinking": piece}
        yield _named_event(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
    delta = {"type": "signature_delta", "signature": block["signature"]}
    yield _named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
    yield _named_event("content_block_stop", {"type": "content_block_stop", "index": index})


def _reasoning_item(call: _Call, status: str) -> JSONObject:
    """An OpenAI Responses ``reasoning`` item: the reasoning as its summary, and encrypted
    content (asked for with ``include: ["reasoning.encrypted_content"]``)."""
    done = status == "completed"
    summary = [{"type": "summary_text", "text": call.reply.thinking}] if done else []
    item: JSONObject = {"id": f"rs_scripted{call.ident}", "type": "reasoning", "summary": summary}
    if "reasoning.encrypted_content" in (call.body.get("include") or ()):
        item["encrypted_content"] = _signature(call) if done else None
    return item


def _reasoning_events(event: Callable[[str, JSONObject], bytes], call: _Call, index: int) -> Iterator[bytes]:
    """A ``reasoning`` item as Responses streams it: its summary part, text deltas, done."""
    text = call.reply.thinking
    item_id = f"rs_scripted{call.ident}"
    where = {"item_id": item_id, "output_index": index, "summary_index": 0}
    yield event(
        "response.output_item.added", {"output_index": index, "item": _reasoning_item(call, "in_progress")}
    )
    yield event(
        "response.reasoning_summary_part.added", {**where, "part": {"type": "summary_text", "text": ""}}
    )
    for piece in _pieces(text, call.reply.chunks):
        yield event("response.reasoning_summary_text.delta", {**where, "delta": piece})
    yield event("response.reasoning_summary_text.done", {**where, "text": text})
    yield event(
        "response.reasoning_summary_part.done", {**where, "part": {"type": "summary_text", "text": text}}
    )
    yield event(
        "response.output_item.done", {"output_index": index, "item": _reasoning_item(call, "completed")}
    )


_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class _Gemini(_Wire):
    """Gemini generateContent / streamGenerateContent."""

    stop_reason = "STOP"
    tool_reason = "STOP"

    def user_text(self, body: JSONObject) -> str:
        contents = body.get("contents")
        if isinstance(contents, str):
            return contents
        if not isinstance(contents, list):
            return ""
        for content in reversed(contents):
            if isinstance(content, dict) and content.get("role", "user") == "user":
                texts = [
                    part["text"]
                    for part in content.get("parts") or ()
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                ]
                if texts:
                    return "\n".join(texts)
        return ""

    def error(self, status: int, message: str) -> JSONObject:
        return {
            "error": {
                "code": status,
                "message": message,
                "status": _GEMINI_STATUS.get(status, "UNKNOWN"),
            }
        }

    @staticmethod
    def _usage(reply: Reply) -> JSONObject:
        return {
            "promptTokenCount": reply.input_tokens,
            "candidatesTokenCount": reply.output_tokens,
            "totalTokenCount": reply.input_tokens + reply.output_tokens,
        }

    @staticmethod
    def _function_parts(reply: Reply) -> list[JSONObject]:
        parts = []
        for spec in reply.tool_calls:
            function_call: JSONObject = {"name": spec.name, "args": _args_object(spec.arguments)}
            if spec.id is not None:
                function_call["id"] = spec.id
            parts.append({"functionCall": function_call})
        return parts

    def _chunk(self, call: _Call, parts: list[JSONObject], final: bool) -> JSONObject:
        candidate: JSONObject = {"content": {"parts": parts, "role": "model"}, "index": 0}
        chunk: JSONObject = {"candidates": [candidate]}
        if final:
            candidate["finishReason"] = self.finish(call.reply)
            chunk["usageMetadata"] = self._usage(call.reply)
        chunk["modelVersion"] = call.model
        chunk["responseId"] = f"scripted{call.ident}"
        return chunk

    def render(self, call: _Call) -> JSONObject:
        reply = call.reply
        parts = [{"text": reply.text}] if reply.text or not reply.tool_calls else []
        return self._chunk(call, parts + self._function_parts(reply), True)

    def _chunks(self, call: _Call) -> list[JSONObject]:
        reply = call.reply
        texts = _pieces(reply.text, reply.chunks) or ([] if reply.tool_calls else [""])
        part_lists = [[{"text": text}] for text in texts]
        if part_lists:
            part_lists[-1].extend(self._function_parts(reply))
        else:
            part_lists = [self._function_parts(reply)]
        last = len(part_lists) - 1
        return [self._chunk(call, parts, i == last) for i, parts in enumerate(part_lists)]

    def render_array(self, call: _Call) -> object:
        return self._chunks(call)

    def events(self, call: _Call) -> Iterator[bytes]:
        # The real API separates SSE events with CRLF pairs.
        for chunk in self._chunks(call):
            yield b"data: " + _dumps(chunk) + b"\r\n\r\n"


_OPENAI_CHAT = _OpenAIChat()
_OPENAI_RESPONSES = _OpenAIResponses()
_ANTHROPIC = _Anthropic()
_GEMINI = _Gemini()

_SIMPLE_ROUTES: dict[str, _Wire] = {
    "/v1/chat/completions": _OPENAI_CHAT,
    "/v1/responses": _OPENAI_RESPONSES,
    "/v1/messages": _ANTHROPIC,
}
_GEMINI_PATH = re.compile(
    r"^/v1(?:beta|alpha)?/(?:models|tunedModels)/([^/:]+):(generateContent|streamGenerateContent)$"
)


_GEMINI_COUNT = re.compile(r"^/v1(?:beta|alpha)?/models/[^/:]+:countTokens$")
_GEMINI_MODELS = re.compile(r"^/v1(?:beta|alpha)/models(?:/([^/:]+))?$")
_GEMINI_V1_MODELS = re.compile(r"^/v1/models(?:/([^/:]+))?$")
#: The models ``GET /v1beta/models`` lists.
GEMINI_MODELS = ("gemini-2.5-flash", "gemini-2.5-pro")


def _gemini_model(name: str) -> JSONObject:
    return {
        "name": f"models/{name}",
        "displayName": name,
        "inputTokenLimit": 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
    }


def _gemini_models(path: str, google: bool) -> JSONObject | None:
    """The answer to a Gemini model list or model lookup, ``None`` for any other path
    (``/v1/models`` is Gemini's only for a request with Google's ``x-goog-api-key``)."""
    match = _GEMINI_MODELS.match(path) or (_GEMINI_V1_MODELS.match(path) if google else None)
    if match is None:
        return None
    if match.group(1) is not None:
        return _gemini_model(match.group(1))
    return {"models": [_gemini_model(name) for name in GEMINI_MODELS]}


@dataclass(frozen=True)
class _Route:
    wire: _Wire
    model: str | None  # None: the request body names the model and may ask to stream
    mode: str  # "json", "sse" or "array" (Gemini's streamGenerateContent without alt=sse)


def _route(path: str, query: str) -> _Route | None:
    wire = _SIMPLE_ROUTES.get(path)
    if wire is not None:
        return _Route(wire, None, "json")
    match = _GEMINI_PATH.match(path)
    if match is None:
        return None
    if match.group(2) == "generateContent":
        return _Route(_GEMINI, match.group(1), "json")
    return _Route(_GEMINI, match.group(1), "sse" if "alt=sse" in query.split("&") else "array")


# ---------------------------------------------------------------------------- HTTP plumbing


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog (5) resets connections when many clients (an
    # asyncio app with hundreds of calls in flight) connect at once.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], owner: ScriptedModelServer) -> None:
        self.owner = owner
        self.stopping = False
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall on some resolvers.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def track(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.add(connection)

    def untrack(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._connections.discard(connection)

    def close_connections(self) -> None:
        """Wake idle keep-alive handler threads so nothing answers after ``stop()``."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError) or (self.stopping and isinstance(error, OSError)):
            return  # the client went away; not the server's problem
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    # Buffered writes: status line, headers and a JSON body leave in one send on flush.
    wbufsize = 1 << 16
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        self.server.untrack(self.connection)
        super().finish()

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def _serve(self) -> None:
        path, _, query = self.path.partition("?")
        body = self._read_body()
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = RecordedRequest(self.command, path, query, headers, body)
        self.server.owner._record(request)
        route = _route(path, query) if self.command == "POST" else None
        if self.command == "POST" and path == "/v1/messages/count_tokens":
            self._count_tokens(request)
        elif self.command == "POST" and _GEMINI_COUNT.match(path):
            self._gemini_count_tokens(request)
        elif (
            self.command == "GET"
            and (listed := _gemini_models(path, "x-goog-api-key" in headers)) is not None
        ):
            self._send_json(200, listed)
        elif route is None:
            self._send_json(404, _not_found(self.command, path))
        else:
            self._answer(route, request)

    def _answer(self, route: _Route, request: RecordedRequest) -> None:
        wire = route.wire
        body = request.json
        if not isinstance(body, dict):
            self._send_json(400, wire.error(400, "request body is not a JSON object"))
            return
        owner = self.server.owner
        rejection = owner._check(request, body)
        if rejection is not None:
            self._send_json(rejection.status, rejection.body)
            return
        mode = route.mode
        if route.model is None and body.get("stream") is True:
            mode = "sse"
        reply = owner._next_reply(lambda: wire.user_text(body))
        model = route.model if route.model is not None else str(body.get("model", ""))
        call = _Call(reply, body, model, owner._next_id(), int(time.time()))
        if reply.delay > 0:
            time.sleep(reply.delay)
        self._send_reply(wire, call, mode)

    def _send_reply(self, wire: _Wire, call: _Call, mode: str) -> None:
        reply = call.reply
        if reply.raw_body is not None:
            content_type = "text/event-stream" if mode == "sse" else "application/json"
            self._send_bytes(reply.status, content_type, reply.raw_body, reply.headers)
        elif reply.status != 200:
            message = reply.text or f"scripted error (HTTP {reply.status})"
            self._send_json(reply.status, wire.error(reply.status, message), reply.headers)
        elif mode == "sse":
            self._send_sse(wire.events(call), reply.truncate_stream_after, reply.headers)
        elif mode == "array":
            pieces = _array_pieces(wire.render_array(call))
            self._send_chunked(
                "application/json; charset=UTF-8", pieces, reply.truncate_stream_after, reply.headers
            )
        else:
            self._send_json(200, wire.render(call), reply.headers)

    def _count_tokens(self, request: RecordedRequest) -> None:
        body = request.json
        if not isinstance(body, dict):
            self._send_json(400, _ANTHROPIC.error(400, "request body is not a JSON object"))
            return
        count = _count_words(body.get("system")) + _count_words(body.get("messages"))
        self._send_json(200, {"input_tokens": max(1, count)})

    def _gemini_count_tokens(self, request: RecordedRequest) -> None:
        body = request.json
        contents = body.get("contents") if isinstance(body, dict) else None
        words = sum(_count_words(c.get("parts")) for c in contents or () if isinstance(c, dict))
        self._send_json(200, {"totalTokens": max(1, words)})

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked_body(self) -> bytes:
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            parts.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return b"".join(parts)

    def _send_json(self, status: int, payload: object, extra: _Headers = ()) -> None:
        self._send_bytes(status, "application/json", _dumps(payload), extra)

    def _send_bytes(self, status: int, content_type: str, data: bytes, extra: _Headers = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self._send_extra(extra)
        self.end_headers()
        self.wfile.write(data)

    def _send_extra(self, extra: _Headers) -> None:
        for name, value in extra:
            self.send_header(name, value)

    def _send_sse(self, events: Iterator[bytes], limit: int | None, extra: _Headers = ()) -> None:
        self._send_chunked("text/event-stream; charset=utf-8", events, limit, extra)

    def _send_chunked(
        self, content_type: str, pieces: Iterator[bytes], limit: int | None, extra: _Headers = ()
    ) -> None:
        """Each piece in a chunk of its own; with ``limit``, the connection closes after
        that many pieces (a stream cut mid-body)."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self._send_extra(extra)
        self.end_headers()
        for count, event in enumerate(pieces):
            if limit is not None and count >= limit:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        if limit is not None:
            self.wfile.flush()
            self.close_connection = True  # end mid-body: no terminating zero-length chunk
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _array_pieces(chunks: object) -> Iterator[bytes]:
    """A Gemini stream without ``alt=sse`` as the API writes it: one JSON array, each
    element in its own piece (``[{...}``, ``\\r\\n,\\r\\n{...}``, ..., ``]``)."""
    assert isinstance(chunks, list)
    for i, chunk in enumerate(chunks):
        yield (b"[" if i == 0 else b"\r\n,\r\n") + _dumps(chunk)
    yield b"]" if chunks else b"[]"


def _not_found(method: str, path: str) -> JSONObject:
    message = f"scripted server: no route for {method} {path}"
    # Readable by all three SDK families' error parsers.
    return {"type": "error", "error": {"type": "not_found_error", "message": message, "code": 404}}


# ---------------------------------------------------------------------------- public server


class ScriptedModelServer:
    """A local HTTP server that answers model calls from a script of :class:`Reply` objects.

    Use it as a context manager (or call :meth:`start` / :meth:`stop`)::

        with ScriptedModelServer() as server:
            server.script(Reply(text="hi"))
            client = openai.OpenAI(base_url=server.openai_base_url, api_key="x")

    Every request is recorded in :attr:`requests`. Note that SDKs retry 429 and 5xx answers by
    default, and each retry consumes the next scripted reply.

    Like the real providers, the server rejects a request whose tool calls and results do not
    pair up (:mod:`memtap.testing.validation`: same status, error body and message), without
    consuming a scripted reply; :attr:`rejected` lists those requests with their messages.
    ``validate=False`` accepts them.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, validate: bool = True) -> None:
        """Prepare a server bound to ``host:port`` on :meth:`start` (port 0: any free port)."""
        self.host = host
        self.port = port
        self.validate = validate
        self.requests: list[RecordedRequest] = []
        #: Requests refused by the providers' validation rules, with the error message.
        self.rejected: list[tuple[RecordedRequest, str]] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedModelServer:
        """Bind and serve in a background daemon thread; returns ``self``. Idempotent."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self.host, self.port), self)
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"memtap-scripted-server-{httpd.server_port}",
            daemon=True,
        )
        thread.start()
        self._httpd, self._thread = httpd, thread
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and release the port. Idempotent."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = self._thread = None
        httpd.stopping = True
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the running server."""
        if self._httpd is None:
            raise RuntimeError("ScriptedModelServer is not running; call start() first")
        return f"http://{self._httpd.server_name}:{self._httpd.server_port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for ``openai.OpenAI(base_url=...)`` (ends in ``/v1``)."""
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for ``anthropic.Anthropic(base_url=...)``."""
        return self.base_url

    @property
    def gemini_base_url(self) -> str:
        """Base URL for Gemini clients (paths start with ``/v1beta/models/...``)."""
        return self.base_url

    def script(self, *replies: Reply) -> None:
        """Queue replies; each model call (any protocol) consumes the oldest one."""
        with self._lock:
            self._replies.extend(replies)

    def clear(self) -> None:
        """Forget recorded requests and drop any replies still queued."""
        with self._lock:
            self.requests.clear()
            self.rejected.clear()
            self._replies.clear()

    def last_json(self) -> dict[str, Any]:
        """Return the JSON object body of the most recent request.

        Raises:
            LookupError: no request has been received.
            ValueError: the last body is not a JSON object.

        """
        with self._lock:
            if not self.requests:
                raise LookupError("no request recorded")
            body = self.requests[-1].json
        if not isinstance(body, dict):
            raise ValueError("the last request body is not a JSON object")
        return body

    def _check(self, request: RecordedRequest, body: dict[str, Any]) -> Rejection | None:
        rejection = check_request(request.path, body) if self.validate else None
        if rejection is not None:
            with self._lock:
                self.rejected.append((request, rejection.message))
        return rejection

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_reply(self, user_text: Callable[[], str]) -> Reply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return Reply(text=f"You said: {user_text()}")

    def _next_id(self) -> int:
        return next(self._ids)


def main(argv: list[str] | None = None) -> int:
    """``python -m memtap.testing.server``: serve the scripted model (a fake for trying your
    own code without a key: every call is answered ``"You said: <text>"``), print its base
    URL on the first line of standard output, and stop on Ctrl-C or SIGTERM."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m memtap.testing.server", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with ScriptedModelServer(args.host, args.port) as server:
        print(server.base_url, flush=True)
        print(
            f"OpenAI SDK: base_url={server.openai_base_url!r}; Anthropic SDK and Gemini: "
            f"base_url={server.base_url!r}; any API key. Ctrl-C stops it.",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):  # a signal handler runs between waits: no busy loop
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
