"""Anthropic Messages bodies on Bedrock (``bedrock.anthropic``): ``invoke_model`` and
``invoke_model_with_response_stream`` with a JSON body carrying ``anthropic_version``.

The body memtap reads is the parsed JSON plus the call's ``modelId`` (Bedrock puts the
model in the URL; the adapter strips ``modelId`` again before re-serialising). Content is a
string or a list of blocks: ``text``, ``tool_use`` (assistant), ``tool_result`` (user), and
others kept as ``[type]`` markers. ``cache_control`` stays where the app put it: memory goes
after the app's system text (per-turn memory after the latest user message's blocks when
the request uses prompt caching).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.content import content_text
from memtap.model import Message, ToolCall, Usage
from memtap.placement import inject_blocks, marks
from memtap.wire import InjectionPlan, RequestView, ResponseView

from .converse import PROVIDER


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, Mapping)]


def _text(blocks: Sequence[Mapping[str, Any]]) -> str:
    return content_text([b for b in blocks if b.get("type") not in ("tool_use", "tool_result")])


def read_messages(messages: Any) -> list[Message]:
    """Anthropic messages as canonical ones (``tool_result`` blocks become ``tool``
    messages, ``tool_use`` blocks tool calls)."""
    out: list[Message] = []
    for m in messages or ():
        if not isinstance(m, Mapping):
            continue
        blocks = _blocks(m.get("content"))
        if m.get("role") == "assistant":
            calls = [
                ToolCall(
                    id=str(b.get("id") or ""),
                    name=str(b.get("name") or ""),
                    arguments=json.dumps(b.get("input") if b.get("input") is not None else {}),
                )
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            out.append(Message(role="assistant", content=_text(blocks), tool_calls=calls))
            continue
        rest = []
        for b in blocks:
            if b.get("type") == "tool_result":
                out.append(
                    Message(
                        role="tool",
                        tool_call_id=str(b.get("tool_use_id") or ""),
                        content=content_text(b.get("content")),
                    )
                )
            else:
                rest.append(b)
        if rest or not blocks:
            out.append(Message(role="user", content=_text(rest)))
    return out


def write_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Canonical messages as Anthropic messages (same-role turns merged)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            role = "user"
            blocks: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}
            ]
        elif m.role == "assistant":
            role = "assistant"
            blocks = [{"type": "text", "text": m.content}] if m.content else []
            for c in m.tool_calls:
                try:
                    arguments = json.loads(c.arguments) if c.arguments else {}
                except ValueError:
                    arguments = {"arguments": c.arguments}
                blocks.append({"type": "tool_use", "id": c.id, "name": c.name, "input": arguments})
        else:
            role = "user"
            blocks = [{"type": "text", "text": m.content}]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def read_usage(u: Any) -> Usage:
    """Anthropic usage."""
    if not isinstance(u, Mapping):
        return Usage()
    return Usage(
        input_tokens=u.get("input_tokens"),
        output_tokens=u.get("output_tokens"),
        cached_input_tokens=u.get("cache_read_input_tokens"),
    )


def is_anthropic_body(body: Any) -> bool:
    """Whether a parsed ``invoke_model`` body is an Anthropic Messages request."""
    return isinstance(body, Mapping) and "anthropic_version" in body and "messages" in body


class BedrockAnthropicProtocol:
    """Anthropic Messages bodies sent through ``invoke_model``."""

    name = "bedrock.anthropic"
    provider = PROVIDER
    operation = "chat"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Messages, ``system`` (string or blocks), model (``modelId``)."""
        system = body.get("system")
        model = body.get("modelId") or body.get("model")
        return RequestView(
            messages=read_messages(body.get("messages")),
            system=(content_text(system) or None) if system else None,
            model=model if isinstance(model, str) else None,
            stream=bool(body.get("stream")),
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """History before the messages; system blocks as in the Anthropic API: anchored in
        a known agent's system text, else after the app's system text (a string stays a
        string, a list of blocks gets one more text block); with ``cache_control`` in use,
        per-turn blocks at the end of the latest user message instead."""
        out = dict(body)
        if plan.history:
            out["messages"] = write_messages(plan.history) + list(body.get("messages") or ())
        if plan.system_blocks:
            cached = "cache_control" in body or marks(
                "cache_control", body.get("system"), body.get("tools"), body.get("messages")
            )
            inject_blocks(out, body, plan, cached=cached)
        return out

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Anthropic streams always report usage."""
        return None

    def is_hidden_usage_event(self, event: Any) -> bool:
        """memtap adds no event."""
        return False

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The assistant message, usage, stop reason and model."""
        messages = read_messages([{"role": "assistant", "content": data.get("content") or []}])
        if not messages[0].content and not messages[0].tool_calls:
            messages = []
        reason = data.get("stop_reason")
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[reason] if reason else [],
            model=data.get("model"),
        )

    def new_accumulator(self) -> AnthropicStreamAccumulator:
        """A fresh accumulator for Anthropic stream events."""
        return AnthropicStreamAccumulator()


class AnthropicStreamAccumulator:
    """Rebuilds an Anthropic message from ``message_start``, ``content_block_*`` and
    ``message_delta`` events."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.reason: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached: int | None = None
        self.model: str | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.model = message.get("model") or self.model
            usage = message.get("usage") or {}
            self.input_tokens = usage.get("input_tokens", self.input_tokens)
            self.output_tokens = usage.get("output_tokens", self.output_tokens)
            self.cached = usage.get("cache_read_input_tokens", self.cached)
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.calls[event.get("index", 0)] = {
                    "id": str(block.get("id") or ""),
                    "name": str(block.get("name") or ""),
                    "arguments": "",
                }
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text.append(str(delta.get("text") or ""))
            elif delta.get("type") == "input_json_delta":
                slot = self.calls.setdefault(event.get("index", 0), {"id": "", "name": "", "arguments": ""})
                slot["arguments"] += str(delta.get("partial_json") or "")
        elif kind == "message_delta":
            self.reason = (event.get("delta") or {}).get("stop_reason") or self.reason
            usage = event.get("usage") or {}
            self.output_tokens = usage.get("output_tokens", self.output_tokens)
            if usage.get("input_tokens") is not None:
                self.input_tokens = usage["input_tokens"]

    def result(self) -> ResponseView:
        """The message so far."""
        calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or "{}")
            for _, c in sorted(self.calls.items())
        )
        text = "".join(self.text)
        messages = [Message(role="assistant", content=text, tool_calls=calls)] if text or calls else []
        return ResponseView(
            messages=messages,
            usage=Usage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                cached_input_tokens=self.cached,
            ),
            finish_reasons=[self.reason] if self.reason else [],
            model=self.model,
        )
