"""The Anthropic Messages format, shared by every transport that carries it.

Anthropic's ``POST /v1/messages`` (``memtap-anthropic``, the proxy), Bedrock's
``invoke_model`` with an Anthropic body (``memtap-bedrock``: the same JSON plus
``anthropic_version``, the model in ``modelId``) and any third-party transport read and
write Claude turns here, so one turn is stored the same whichever way it travelled
(:mod:`memtap.testing.anthropic_turn` is the turn every transport's tests check).

The canonical reading of a turn into memtap's :class:`~memtap.protocol.model.Message`:

- **An assistant's text blocks are concatenated as they are** (no separator). The API
  splits one answer over consecutive text blocks (citations cut a sentence around each
  cited span, server tools interleave their results), and the SDK's ``get_final_text()``
  joins them so; a newline would break sentences the model wrote whole.
- **A user's content parts, a ``tool_result``'s content and ``system`` blocks are separate
  parts**: joined by a newline as :func:`memtap.formats.content.content_text` joins the OpenAI chat
  format's parts (system blocks by a blank line, as the chat codec joins system messages),
  every other part as a ``[type]`` marker (``[image]``, ``[document]``...).
- **Thinking is left out** (``thinking``, ``redacted_thinking``): it is the model's private
  reasoning, not conversation, and only valid re-sent as the signed block it came in. memtap
  writes history back as text and ``tool_use`` blocks only, so an injected turn never
  carries a thinking block that lost its signature; the app's own messages, thinking
  included, are forwarded byte for byte.
- **``tool_use`` input is JSON text written one way** (``json.dumps(..., ensure_ascii=False)``)
  whatever its source: a request's object, a response's object, a stream's
  concatenated ``partial_json`` (which the API sends ASCII-escaped).
- **Usage**: ``input_tokens`` counts every input token, cache reads and writes included
  (as OpenAI's ``prompt_tokens`` does); ``cached_input_tokens`` is the cache read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.formats.pairing import trim_unpaired
from memtap.formats.placement import inject_blocks, marks
from memtap.protocol.model import Message, ToolCall, Usage
from memtap.protocol.wire import BaseWireProtocol, InjectionPlan, RequestView, ResponseView

__all__ = [
    "THINKING_TYPES",
    "AnthropicFormatProtocol",
    "MessagesStreamAccumulator",
    "blocks_text",
    "inject_messages",
    "is_tail_turn",
    "read_message",
    "read_messages_request",
    "read_messages_response",
    "read_usage",
    "system_text",
    "tool_arguments",
    "uses_prompt_cache",
    "write_history",
    "write_message",
]

#: Block types that hold the model's private reasoning: never stored as conversation text.
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def tool_arguments(value: Any) -> str:
    """A ``tool_use`` block's ``input`` as JSON text, written one way whatever its source
    (a request's object, a response's object, a stream's concatenated ``partial_json``),
    so a streamed and an unstreamed call store the same arguments."""
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text) if text.strip() else {}
        except ValueError:
            return text
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def blocks_text(blocks: Any, joiner: str) -> str:
    """The text of string-or-blocks content: text blocks joined by ``joiner``, thinking left
    out, ``tool_use`` / ``tool_result`` left to the caller, a ``[type]`` marker for the rest."""
    if blocks is None:
        return ""
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, Mapping):
        blocks = [blocks]
    pieces: list[str] = []
    for block in blocks:
        if isinstance(block, str):
            pieces.append(block)
            continue
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" or (kind is None and "text" in block):
            pieces.append(str(block.get("text") or ""))
        elif kind in THINKING_TYPES or kind in ("tool_use", "tool_result"):
            continue
        else:
            pieces.append(f"[{kind or 'block'}]")
    return joiner.join(pieces)


def read_message(m: Mapping[str, Any]) -> list[Message]:
    """One wire message as canonical messages: an assistant message with its ``tool_use``
    calls; a user message's ``tool_result`` blocks as ``tool`` messages (first, as the API
    requires them first), then its own text, if it has any."""
    role = m.get("role")
    content = m.get("content")
    blocks = content if isinstance(content, list) else []
    if role == "assistant":
        calls = tuple(
            ToolCall(
                id=str(b.get("id") or ""),
                name=str(b.get("name") or ""),
                arguments=tool_arguments(b.get("input")),
            )
            for b in blocks
            if isinstance(b, Mapping) and b.get("type") == "tool_use"
        )
        return [Message(role="assistant", content=blocks_text(content, ""), tool_calls=calls)]
    out = [
        Message(
            role="tool",
            tool_call_id=str(b.get("tool_use_id") or ""),
            content=blocks_text(b.get("content"), "\n"),
        )
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    ]
    rest = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool_result")]
    if not out or rest:
        out.append(Message(role="user", content=blocks_text(rest if blocks else content, "\n")))
    return out


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        given = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        given = {}
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": given if isinstance(given, dict) else {},
    }


def write_message(m: Message) -> dict[str, Any] | None:
    """One canonical message as a wire message (``None`` for one the API would reject):
    plain text as a string, an assistant's tool calls as ``tool_use`` blocks after its
    text, a ``tool`` message as a user message with its ``tool_result``."""
    if m.role == "tool":
        result = {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}
        return {"role": "user", "content": [result]}
    if m.role == "assistant" and m.tool_calls:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks += [_tool_use(c) for c in m.tool_calls]
        return {"role": "assistant", "content": blocks}
    if not m.content:
        return None
    return {"role": "assistant" if m.role == "assistant" else "user", "content": m.content}


def _as_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _tool_use_ids(message: Mapping[str, Any]) -> set[str]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return set()
    return {str(b.get("id")) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"}


def _tool_result_ids(message: Any) -> set[str]:
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return set()
    return {
        str(b.get("tool_use_id"))
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    }


def write_history(history: Sequence[Message], following: Any) -> list[dict[str, Any]]:
    """Canonical history as wire messages that may stand before ``following`` (the app's
    first message, or ``None``): roles alternate (same-role turns are merged), the first
    is a user turn, and a ``tool_use`` is never separated from its ``tool_result``."""
    out: list[dict[str, Any]] = []
    for m in history:
        wire = write_message(m)
        if wire is None:
            continue
        if out and out[-1]["role"] == wire["role"]:
            out[-1] = {
                "role": wire["role"],
                "content": _as_blocks(out[-1]["content"]) + _as_blocks(wire["content"]),
            }
        else:
            out.append(wire)
    # A lone tool_use the app's own tool results answer stays: the request needs it.
    return trim_unpaired(
        out,
        following,
        next_role=following.get("role") if isinstance(following, Mapping) else None,
        call_ids=_tool_use_ids,
        result_ids=_tool_result_ids,
        keep_answered_lead=True,
    )


def read_usage(u: Any) -> Usage:
    """Anthropic usage as :class:`Usage`: ``input_tokens`` counts every input token, the
    ones read from and written to the prompt cache included (as OpenAI's
    ``prompt_tokens`` does); ``cached_input_tokens`` is the cache read."""
    if not isinstance(u, Mapping) or not u:
        return Usage()
    given = u.get("input_tokens")
    read = u.get("cache_read_input_tokens")
    written = u.get("cache_creation_input_tokens")
    total = None if given is None else given + (read or 0) + (written or 0)
    return Usage(input_tokens=total, output_tokens=u.get("output_tokens"), cached_input_tokens=read)


def system_text(system: Any) -> str | None:
    """A ``system`` (string or text blocks) as text, blocks apart by a blank line."""
    if system is None:
        return None
    text = blocks_text(system, "\n\n")
    return text or None


def read_messages_request(body: Mapping[str, Any]) -> RequestView:
    """Conversation messages (tool results as ``tool`` messages), system text, model and
    stream flag. A ``{"role": "system"}`` message inside ``messages`` (Claude Code sends its
    environment so) is system text, after ``system``'s."""
    messages: list[Message] = []
    system = system_text(body.get("system"))
    for m in body.get("messages") or ():
        if not isinstance(m, Mapping):
            continue
        if m.get("role") == "system":
            text = system_text(m.get("content"))
            if text:
                system = f"{system}\n\n{text}" if system else text
            continue
        messages.extend(read_message(m))
    model = body.get("model")
    return RequestView(
        messages=messages,
        system=system,
        model=model if isinstance(model, str) else None,
        stream=bool(body.get("stream")),
    )


def read_messages_response(data: Mapping[str, Any]) -> ResponseView:
    """The assistant message (text and tool calls), usage, stop reason and model."""
    messages = [m for m in read_message({**data, "role": "assistant"}) if m.content or m.tool_calls]
    reason = data.get("stop_reason")
    return ResponseView(
        messages=messages,
        usage=read_usage(data.get("usage")),
        finish_reasons=[reason] if reason else [],
        model=data.get("model"),
    )


def is_tail_turn(turn: Any) -> bool:
    """Where per-turn blocks may go: the latest user message, or a ``system`` message
    after it (Claude Code's environment message, which carries its cache breakpoint on a
    first turn: text before it would change the cached prefix)."""
    return isinstance(turn, Mapping) and turn.get("role") in ("user", "system")


def uses_prompt_cache(body: Mapping[str, Any]) -> bool:
    """Whether an Anthropic request uses prompt caching: ``cache_control`` on the request,
    a system block, a tool, or a message's content block."""
    return "cache_control" in body or marks(
        "cache_control", body.get("system"), body.get("tools"), body.get("messages")
    )


def inject_messages(body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
    """A new body: history before the app's messages (:func:`write_history`); system
    blocks where :func:`memtap.formats.placement.inject_blocks` puts them: anchored inside a known
    agent's system text, else at the end of ``system`` (one more text block after the
    app's last ``cache_control`` breakpoint for a block list, after a blank line for a
    string, which stays a string); with prompt caching in use (:func:`uses_prompt_cache`),
    per-turn blocks at the end of the latest user message, never in the cached prefix."""
    out = dict(body)
    messages = list(body.get("messages") or ())
    history = write_history(plan.history, messages[0] if messages else None)
    if history:
        out["messages"] = history + messages
    if plan.system_blocks:
        inject_blocks(out, body, plan, cached=uses_prompt_cache(body), is_tail=is_tail_turn)
    return out


class AnthropicFormatProtocol(BaseWireProtocol):
    """The Anthropic Messages format as a wire protocol: reading, injection, stream
    accumulation. A subclass adds ``name`` and ``provider`` (and reads what its transport
    adds, e.g. Bedrock's ``modelId``). Anthropic streams always report usage
    (``message_start``, ``message_delta``): the base's stream-usage defaults hold."""

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """See :func:`read_messages_request`."""
        return read_messages_request(body)

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """See :func:`inject_messages`."""
        return inject_messages(body, plan)

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """See :func:`read_messages_response`."""
        return read_messages_response(data)

    def new_accumulator(self) -> MessagesStreamAccumulator:
        """A fresh accumulator for a Messages event stream."""
        return MessagesStreamAccumulator()


class MessagesStreamAccumulator:
    """Rebuilds the message from ``message_start``, the content block events and
    ``message_delta``, then reads it like a complete response
    (:func:`read_messages_response`), so a streamed turn is stored as an unstreamed one."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        # Pieces joined once in result(): a long answer comes in thousands of deltas.
        self.text: dict[int, list[str]] = {}
        self.json: dict[int, list[str]] = {}

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event."""
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), Mapping):
            self.message = dict(event["message"])
            self.usage.update(_given(self.message.get("usage")))
        elif kind == "content_block_start" and isinstance(event.get("content_block"), Mapping):
            block = dict(event["content_block"])
            if block.get("type") == "text":
                block["text"] = str(block.get("text") or "")
            self.blocks[int(event.get("index") or 0)] = block
        elif kind == "content_block_delta":
            self._delta(int(event.get("index") or 0), event.get("delta") or {})
        elif kind == "message_delta":
            self.message.update(_given(event.get("delta")))
            self.usage.update(_given(event.get("usage")))

    def _delta(self, index: int, delta: Mapping[str, Any]) -> None:
        self.blocks.setdefault(index, {"type": "text", "text": ""})  # a delta before its start
        kind = delta.get("type")
        if kind == "text_delta":
            self.text.setdefault(index, []).append(str(delta.get("text") or ""))
        elif kind == "input_json_delta":
            self.json.setdefault(index, []).append(str(delta.get("partial_json") or ""))

    def result(self) -> ResponseView:
        """The message so far."""
        content = []
        for index, block in sorted(self.blocks.items()):
            if index in self.text:
                block = {**block, "text": str(block.get("text") or "") + "".join(self.text[index])}
            if index in self.json:
                block = {**block, "input": "".join(self.json[index])}
            content.append(block)
        return read_messages_response({**self.message, "content": content, "usage": self.usage})


def _given(value: Any) -> dict[str, Any]:
    """The fields of a delta that are set (a ``None`` never overwrites what is known)."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if v is not None}
