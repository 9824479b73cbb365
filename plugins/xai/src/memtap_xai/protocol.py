"""The ``xai.chat`` protocol: xAI's gRPC Chat service (``GetCompletion`` /
``GetCompletionChunk``), read and edited as JSON.

The body is the ``GetCompletionsRequest`` proto as ``MessageToDict(request,
preserving_proto_field_name=True)`` gives it: snake_case field names, enums by name
(``"ROLE_USER"``), fields at their default value left out (a missing ``index`` is 0).
Responses and chunks are read in the same form. Content is a list of parts ``{"text"}``,
``{"image_url"}`` or ``{"file"}``; tool calls carry ``{"id", "function": {"name",
"arguments"}}``; a tool result is a ``ROLE_TOOL`` message with ``tool_call_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memtap.sdk import (
    BaseWireProtocol,
    ChatStreamAccumulator,
    InjectionPlan,
    Message,
    MessageCodec,
    RequestView,
    ResponseView,
    Role,
    SystemBlock,
    ToolCall,
    Usage,
    layout_messages,
    render_blocks,
)

SYSTEM_ROLES = frozenset({"ROLE_SYSTEM", "ROLE_DEVELOPER"})
_ROLES: dict[str, Role] = {"ROLE_ASSISTANT": "assistant", "ROLE_TOOL": "tool", "ROLE_FUNCTION": "tool"}
_WIRE_ROLES = {
    "user": "ROLE_USER",
    "assistant": "ROLE_ASSISTANT",
    "tool": "ROLE_TOOL",
    "system": "ROLE_SYSTEM",
}


def content_text(content: Any) -> str:
    """The text of an xAI content list (images and files as ``[image_url]``/``[file]``)."""
    if isinstance(content, str):
        return content
    pieces = []
    for part in content or ():
        if not isinstance(part, Mapping):
            continue
        if "text" in part:
            pieces.append(str(part["text"]))
        elif part:
            pieces.append(f"[{next(iter(part))}]")
    return "\n".join(pieces)


def read_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """xAI tool calls (client-side function calls)."""
    calls = []
    for c in raw or ():
        fn = c.get("function") or {}
        calls.append(
            ToolCall(
                id=str(c.get("id") or ""),
                name=str(fn.get("name") or ""),
                arguments=str(fn.get("arguments") or ""),
            )
        )
    return tuple(calls)


def read_message(m: Mapping[str, Any]) -> Message:
    """An xAI message as a canonical one."""
    return Message(
        role=_ROLES.get(str(m.get("role")), "user"),
        content=content_text(m.get("content")),
        tool_calls=read_tool_calls(m.get("tool_calls")),
        tool_call_id=m.get("tool_call_id") or None,
        name=m.get("name") or None,
    )


def write_message(m: Message) -> dict[str, Any]:
    """A canonical message as an xAI message."""
    out: dict[str, Any] = {"role": _WIRE_ROLES[m.role], "content": [{"text": m.content}]}
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id or ""
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls
        ]
    return out


def read_usage(u: Any) -> Usage:
    """xAI ``SamplingUsage``."""
    if not isinstance(u, Mapping):
        return Usage()
    return Usage(
        input_tokens=u.get("prompt_tokens", 0),
        output_tokens=u.get("completion_tokens", 0),
        cached_input_tokens=u.get("cached_prompt_text_tokens"),
    )


class XaiCodec(MessageCodec):
    """xAI messages for :func:`memtap.formats.layout.layout_messages`."""

    def is_system_message(self, item: Any) -> bool:
        """A ``ROLE_SYSTEM`` / ``ROLE_DEVELOPER`` message."""
        return isinstance(item, Mapping) and item.get("role") in SYSTEM_ROLES

    def write_message(self, message: Message) -> dict[str, Any]:
        """See :func:`write_message`."""
        return write_message(message)

    def system_message(self, blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
        """Blocks as one ``ROLE_SYSTEM`` message (none without blocks)."""
        return [{"role": "ROLE_SYSTEM", "content": [{"text": render_blocks(blocks)}]}] if blocks else []


CODEC = XaiCodec()


class XaiChatProtocol(BaseWireProtocol):
    """xAI Chat over gRPC (``xai_sdk`` ``chat.create(...).sample()`` / ``.stream()``); its
    streams always report usage (the base's stream-usage defaults hold)."""

    name = "xai.chat"
    provider = "xai"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Messages, system/developer text, model; ``stream`` is set by the adapter."""
        system: list[str] = []
        messages: list[Message] = []
        for m in body.get("messages") or ():
            if not isinstance(m, Mapping):
                continue
            if m.get("role") in SYSTEM_ROLES:
                system.append(content_text(m.get("content")))
            else:
                messages.append(read_message(m))
        return RequestView(
            messages=messages,
            system="\n\n".join(system) if system else None,
            model=body.get("model"),
            stream=bool(body.get("stream")),
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """The app's leading system messages, ``session_init`` blocks, history, ``per_turn``
        blocks, then the app's other messages. No history when the server holds the
        conversation (``previous_response_id``)."""
        out = dict(body)
        out["messages"] = layout_messages(
            list(body.get("messages") or ()), plan, CODEC, history=not body.get("previous_response_id")
        )
        return out

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The first output's message, every output's finish reason, usage and model."""
        outputs = sorted(data.get("outputs") or (), key=lambda o: o.get("index", 0))
        messages = []
        if outputs:
            message = outputs[0].get("message") or {}
            messages.append(
                Message(
                    role="assistant",
                    content=str(message.get("content") or ""),
                    tool_calls=read_tool_calls(message.get("tool_calls")),
                )
            )
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[o["finish_reason"] for o in outputs if o.get("finish_reason")],
            model=data.get("model"),
        )

    def new_accumulator(self) -> ChatStreamAccumulator:
        """A fresh accumulator for ``GetChatCompletionChunk`` messages: chat deltas under
        ``outputs``, each tool call whole (the first output's text and tool calls)."""
        return ChatStreamAccumulator(read_usage, choices="outputs", whole_tool_calls=True)
