"""The Bedrock Converse protocol (``bedrock.converse``): ``converse`` / ``converse_stream``.

The body is the method's keyword arguments, which botocore serialises to the REST body
after memtap has injected (``modelId`` goes into the URL; everything else is the JSON the
proxy would see, so the same code reads both). Messages alternate ``user``/``assistant``
and hold content blocks: ``text``, ``toolUse`` (assistant), ``toolResult`` (user), and
media/document/reasoning blocks (kept as ``[kind]`` markers in what is stored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.sdk import (
    BaseWireProtocol,
    ChatStreamAccumulator,
    InjectionPlan,
    Message,
    RequestView,
    ResponseView,
    ToolCall,
    Usage,
    inject_blocks,
    marks,
)

PROVIDER = "aws.bedrock"


def _text_block(text: str) -> dict[str, Any]:
    return {"text": text}


def _block_text(blocks: Any) -> str:
    """The text of a list of Converse content blocks (other kinds as ``[kind]``)."""
    if isinstance(blocks, str):
        return blocks
    pieces: list[str] = []
    for block in blocks or ():
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            pieces.append(block["text"])
        elif "json" in block:
            pieces.append(json.dumps(block["json"]))
        elif "cachePoint" in block:
            continue
        else:
            kind = next(iter(block), "part")
            pieces.append(f"[{kind}]")
    return "\n".join(pieces)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def read_messages(messages: Any) -> list[Message]:
    """Converse messages as canonical messages: a user message's ``toolResult`` blocks
    become ``tool`` messages (before its text), an assistant's ``toolUse`` blocks tool calls."""
    out: list[Message] = []
    for m in messages or ():
        if not isinstance(m, Mapping):
            continue
        blocks = [b for b in m.get("content") or () if isinstance(b, Mapping)]
        if m.get("role") == "assistant":
            calls = [
                ToolCall(
                    id=str(b["toolUse"].get("toolUseId") or ""),
                    name=str(b["toolUse"].get("name") or ""),
                    arguments=_arguments(b["toolUse"].get("input")),
                )
                for b in blocks
                if isinstance(b.get("toolUse"), Mapping)
            ]
            text = _block_text([b for b in blocks if "toolUse" not in b])
            out.append(Message(role="assistant", content=text, tool_calls=calls))
            continue
        rest = []
        for b in blocks:
            result = b.get("toolResult")
            if isinstance(result, Mapping):
                out.append(
                    Message(
                        role="tool",
                        tool_call_id=str(result.get("toolUseId") or ""),
                        content=_block_text(result.get("content")),
                    )
                )
            else:
                rest.append(b)
        if rest or not blocks:
            out.append(Message(role="user", content=_block_text(rest)))
    return out


def write_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Canonical messages as Converse messages (consecutive same-role turns merged, as
    Bedrock requires roles to alternate)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            role = "user"
            blocks: list[dict[str, Any]] = [
                {"toolResult": {"toolUseId": m.tool_call_id or "", "content": [{"text": m.content}]}}
            ]
        elif m.role == "assistant":
            role = "assistant"
            blocks = [{"text": m.content}] if m.content else []
            for c in m.tool_calls:
                try:
                    arguments = json.loads(c.arguments) if c.arguments else {}
                except ValueError:
                    arguments = {"arguments": c.arguments}
                blocks.append({"toolUse": {"toolUseId": c.id, "name": c.name, "input": arguments}})
        else:
            role = "user"
            blocks = [{"text": m.content}]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def read_usage(u: Any) -> Usage:
    """Converse usage (``inputTokens``/``outputTokens``/``cacheReadInputTokens``)."""
    if not isinstance(u, Mapping):
        return Usage()
    return Usage(
        input_tokens=u.get("inputTokens"),
        output_tokens=u.get("outputTokens"),
        cached_input_tokens=u.get("cacheReadInputTokens"),
    )


class ConverseProtocol(BaseWireProtocol):
    """Bedrock Converse / ConverseStream (a stream always ends with a ``metadata`` event
    carrying usage: the base's stream-usage defaults hold)."""

    name = "bedrock.converse"
    provider = PROVIDER

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Messages, ``system`` text blocks, ``modelId``; ``stream`` is set by the adapter."""
        system = _block_text(body.get("system")) if body.get("system") else None
        model = body.get("modelId")
        return RequestView(
            messages=read_messages(body.get("messages")),
            system=system or None,
            model=model if isinstance(model, str) else None,
            stream=bool(body.get("stream")),
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """History before the app's messages; memory blocks anchored in a known agent's
        system text, else appended to ``system`` (after the app's own blocks and cache
        points: a cached prefix stays cached); with ``cachePoint`` blocks in use, per-turn
        blocks go at the end of the latest user message instead."""
        out = dict(body)
        if plan.history:
            out["messages"] = write_messages(plan.history) + list(body.get("messages") or ())
        if plan.system_blocks:
            tools = body.get("toolConfig")
            cached = marks(
                "cachePoint",
                body.get("system"),
                body.get("messages"),
                tools.get("tools") if isinstance(tools, Mapping) else None,
            )
            inject_blocks(out, body, plan, cached=cached, part=_text_block, system_as_list=True)
        return out

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """``output.message``, ``usage`` and ``stopReason``."""
        message = (data.get("output") or {}).get("message")
        messages = read_messages([message]) if isinstance(message, Mapping) else []
        reason = data.get("stopReason")
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[reason] if reason else [],
        )

    def new_accumulator(self) -> ConverseStreamAccumulator:
        """A fresh accumulator for ConverseStream events."""
        return ConverseStreamAccumulator()


class ConverseStreamAccumulator(ChatStreamAccumulator):
    """Rebuilds a Converse answer from ``contentBlockStart``/``Delta``, ``messageStop`` and
    ``metadata`` events (core's delta accumulator, fed what each event holds)."""

    def __init__(self) -> None:
        super().__init__(read_usage, empty_arguments="{}")

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event (``{"contentBlockDelta": {...}}`` etc.)."""
        start = event.get("contentBlockStart")
        if isinstance(start, Mapping):
            tool = (start.get("start") or {}).get("toolUse")
            if isinstance(tool, Mapping):
                self.add_call(
                    start.get("contentBlockIndex", 0),
                    id=str(tool.get("toolUseId") or ""),
                    name=str(tool.get("name") or ""),
                )
        delta_event = event.get("contentBlockDelta")
        if isinstance(delta_event, Mapping):
            delta = delta_event.get("delta") or {}
            if isinstance(delta.get("text"), str):
                self.add_text(delta["text"])
            tool_delta = delta.get("toolUse")
            if isinstance(tool_delta, Mapping):
                index = delta_event.get("contentBlockIndex", 0)
                self.add_call(index, arguments=str(tool_delta.get("input") or ""))
        stop = event.get("messageStop")
        if isinstance(stop, Mapping) and stop.get("stopReason"):
            self.set_finish_reason(0, stop["stopReason"])
        metadata = event.get("metadata")
        if isinstance(metadata, Mapping) and metadata.get("usage"):
            self.usage = metadata["usage"]
