"""The Acme wire protocol: how memtap reads and edits Acme's request JSON and reads its
responses and stream events. (Acme speaks an OpenAI-compatible chat format, which
``memtap.sdk.ChatFormatProtocol`` already reads: ``plugins/_template`` uses it. Here it is
written out in full, as a provider with a format of its own needs, so that the example runs
against memtap's scripted server.)

Everything here works on plain JSON (dicts and lists), never on SDK objects, so the same
code serves an SDK registered in-process and memtap's HTTP proxy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memtap.sdk import (
    ChatStreamAccumulator,
    InjectionPlan,
    Message,
    MessageCodec,
    RequestView,
    ResponseView,
    SystemBlock,
    ToolCall,
    Usage,
    content_text,
    layout_messages,
    render_blocks,
)


def _calls(raw: Any) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(
            id=str(c.get("id") or ""),
            name=str((c.get("function") or {}).get("name") or ""),
            arguments=str((c.get("function") or {}).get("arguments") or ""),
        )
        for c in raw or ()
    )


def read_message(m: Mapping[str, Any]) -> Message:
    """One wire message as a canonical :class:`memtap.Message`."""
    role = m.get("role")
    return Message(
        role=role if role in ("assistant", "tool") else "user",
        content=content_text(m.get("content")),
        tool_calls=_calls(m.get("tool_calls")),
        tool_call_id=m.get("tool_call_id"),
    )


def write_message(m: Message) -> dict[str, Any]:
    """A canonical message as a wire message (for injected history)."""
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    return out


def read_usage(u: Mapping[str, Any] | None) -> Usage:
    """Acme's usage object as :class:`memtap.Usage`."""
    if not u:
        return Usage()
    return Usage(input_tokens=u.get("prompt_tokens"), output_tokens=u.get("completion_tokens"))


class AcmeCodec(MessageCodec):
    """Acme's messages as ``memtap.sdk.layout_messages`` needs them to place history and memory."""

    def is_system_message(self, item: Any) -> bool:
        """An app's system message (the leading ones keep their place, first)."""
        return isinstance(item, Mapping) and item.get("role") == "system"

    def write_message(self, message: Message) -> dict[str, Any]:
        """A history message (see :func:`write_message`)."""
        return write_message(message)

    def system_message(self, blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
        """Memory blocks as one system message (``render_blocks`` labels and escapes them)."""
        return [{"role": "system", "content": render_blocks(blocks)}] if blocks else []


CODEC = AcmeCodec()


class AcmeChatProtocol:
    """Acme chat completions (``POST /chat/completions``)."""

    name = "acme_wire.chat"
    provider = "acme"
    operation = "chat"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """The conversation (system messages apart), model and stream flag. Never edits ``body``."""
        system = [
            content_text(m.get("content")) for m in body.get("messages") or () if m.get("role") == "system"
        ]
        return RequestView(
            messages=[read_message(m) for m in body.get("messages") or () if m.get("role") != "system"],
            system="\n\n".join(system) or None,
            model=body.get("model"),
            stream=bool(body.get("stream")),
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """A new body: the app's leading system messages, memory blocks, the history, then
        the app's other messages. ``memtap.sdk.layout_messages`` does the ordering, places blocks at a
        known agent's slots, and keeps them out of a prompt-cached prefix (pass ``cached``
        when Acme requests say they use one). Nothing else changes."""
        out = dict(body)
        out["messages"] = layout_messages(list(body.get("messages") or ()), plan, CODEC)
        return out

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Acme streams report usage only when asked: ask, unless the caller said anything."""
        if not body.get("stream") or "stream_options" in body:
            return None
        return {**body, "stream_options": {"include_usage": True}}

    def is_hidden_usage_event(self, event: Any) -> bool:
        """The usage-only event memtap asked for (hidden from the caller then)."""
        return isinstance(event, Mapping) and not event.get("choices") and event.get("usage") is not None

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The first choice's message, finish reasons, usage and model."""
        choices = data.get("choices") or []
        messages = [read_message({**choices[0].get("message", {}), "role": "assistant"})] if choices else []
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[c["finish_reason"] for c in choices if c.get("finish_reason")],
            model=data.get("model"),
        )

    def new_accumulator(self) -> ChatStreamAccumulator:
        """A fresh accumulator for one streamed answer: Acme streams OpenAI-style deltas
        (text and tool-call deltas by index, usage, finish reasons), which
        ``memtap.sdk.ChatStreamAccumulator`` rebuilds, given how to read Acme's usage (its
        other parameters say where a format streams its choices and tool calls otherwise)."""
        return ChatStreamAccumulator(read_usage)
