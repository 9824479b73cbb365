"""The Anthropic Messages wire protocol (``POST /v1/messages``), also used by ``beta.messages``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.model import Message, ToolCall, Usage
from memtap.placement import inject_blocks, marks
from memtap.wire import InjectionPlan, RequestView, ResponseView

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


def _text(blocks: Any, joiner: str) -> str:
    """The text of string-or-blocks content: text blocks joined, thinking left out,
    ``tool_use`` / ``tool_result`` left to the caller, a ``[type]`` marker for the rest."""
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
        return [Message(role="assistant", content=_text(content, ""), tool_calls=calls)]
    out = [
        Message(
            role="tool",
            tool_call_id=str(b.get("tool_use_id") or ""),
            content=_text(b.get("content"), "\n"),
        )
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    ]
    rest = [b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool_result")]
    if not out or rest:
        out.append(Message(role="user", content=_text(rest if blocks else content, "\n")))
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


def _wire_message(m: Message) -> dict[str, Any] | None:
    """One canonical message as a wire message (``None`` for one the API would reject)."""
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
        wire = _wire_message(m)
        if wire is None:
            continue
        if out and out[-1]["role"] == wire["role"]:
            out[-1] = {
                "role": wire["role"],
                "content": _as_blocks(out[-1]["content"]) + _as_blocks(wire["content"]),
            }
        else:
            out.append(wire)
    answered = _tool_result_ids(following)
    while out and (out[0]["role"] != "user" or _tool_result_ids(out[0])):
        if len(out) == 1 and _tool_use_ids(out[0]) & answered:
            break  # the app's own tool results answer it: the request needs this tool_use
        out.pop(0)  # the first turn is the user's, and no result precedes its tool_use
    next_role = following.get("role") if isinstance(following, Mapping) else None
    while out:
        last = out[-1]
        if last["role"] == next_role or (_tool_use_ids(last) - answered):
            out.pop()
            if _tool_result_ids(last) and out:
                out.pop()  # the results' tool_use would be left unanswered
            continue
        break
    return out


def read_usage(u: Mapping[str, Any] | None) -> Usage:
    """Anthropic usage as :class:`Usage`: ``input_tokens`` counts every input token, the
    ones read from and written to the prompt cache included (as OpenAI's
    ``prompt_tokens`` does); ``cached_input_tokens`` is the cache read."""
    if not u:
        return Usage()
    given = u.get("input_tokens")
    read = u.get("cache_read_input_tokens")
    written = u.get("cache_creation_input_tokens")
    total = None if given is None else given + (read or 0) + (written or 0)
    return Usage(input_tokens=total, output_tokens=u.get("output_tokens"), cached_input_tokens=read)


def _system_text(system: Any) -> str | None:
    if system is None:
        return None
    text = _text(system, "\n\n")
    return text or None


class AnthropicMessagesProtocol:
    """Anthropic Messages: ``system`` apart from ``messages``, content as blocks."""

    name = "anthropic.messages"
    provider = "anthropic"
    operation = "chat"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Conversation messages (tool results as ``tool`` messages), system text, model and
        stream flag. A ``{"role": "system"}`` message inside ``messages`` (Claude Code
        sends its environment so) is system text, after ``system``'s."""
        messages: list[Message] = []
        system = _system_text(body.get("system"))
        for m in body.get("messages") or ():
            if not isinstance(m, Mapping):
                continue
            if m.get("role") == "system":
                text = _system_text(m.get("content"))
                if text:
                    system = f"{system}\n\n{text}" if system else text
                continue
            messages.extend(read_message(m))
        return RequestView(
            messages=messages,
            system=system,
            model=body.get("model"),
            stream=bool(body.get("stream")),
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """History before the app's messages; system blocks where
        :func:`memtap.placement.inject_blocks` puts them: anchored inside a known agent's
        system text, else at the end of ``system`` (one more text block after the app's
        last ``cache_control`` breakpoint for a block list, after a blank line for a string,
        which stays a string); with prompt caching in use (:func:`uses_prompt_cache`),
        per-turn blocks at the end of the latest user message, never in the cached prefix.
        """
        out = dict(body)
        messages = list(body.get("messages") or ())
        history = write_history(plan.history, messages[0] if messages else None)
        if history:
            out["messages"] = history + messages
        if plan.system_blocks:
            inject_blocks(out, body, plan, cached=uses_prompt_cache(body), is_tail=is_tail_turn)
        return out

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Anthropic streams always report usage (``message_start``, ``message_delta``)."""
        return None

    def is_hidden_usage_event(self, event: Any) -> bool:
        """No event is ever added by memtap."""
        return False

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The assistant message (text and tool calls), usage, stop reason and model."""
        messages = [m for m in read_message({**data, "role": "assistant"}) if m.content or m.tool_calls]
        reason = data.get("stop_reason")
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[reason] if reason else [],
            model=data.get("model"),
        )

    def new_accumulator(self) -> MessagesStreamAccumulator:
        """A fresh accumulator for a Messages event stream."""
        return MessagesStreamAccumulator(self)


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


class MessagesStreamAccumulator:
    """Rebuilds the message from ``message_start``, the content block events and
    ``message_delta``, then reads it like a complete response."""

    def __init__(self, protocol: AnthropicMessagesProtocol) -> None:
        self.protocol = protocol
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
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
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif kind == "input_json_delta":
            self.json.setdefault(index, []).append(str(delta.get("partial_json") or ""))

    def result(self) -> ResponseView:
        """The message so far."""
        content = []
        for index, block in sorted(self.blocks.items()):
            if index in self.json:
                block = {**block, "input": "".join(self.json[index])}
            content.append(block)
        return self.protocol.read_response({**self.message, "content": content, "usage": self.usage})


def _given(value: Any) -> dict[str, Any]:
    """The fields of a delta that are set (a ``None`` never overwrites what is known)."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if v is not None}
