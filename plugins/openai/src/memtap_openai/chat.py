"""The OpenAI Chat Completions wire protocol (``POST /v1/chat/completions``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memtap.blocks import render_blocks
from memtap.content import content_text
from memtap.layout import layout_messages
from memtap.model import Message, ToolCall, Usage
from memtap.wire import InjectionPlan, RequestView, ResponseView, SystemBlock

SYSTEM_ROLES = frozenset({"system", "developer"})


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    calls = []
    for c in raw or ():
        fn = c.get("function") or {}
        calls.append(
            ToolCall(
                id=str(c.get("id") or ""),
                name=str(fn.get("name") or ""),
                arguments=str(fn.get("arguments") or ""),
                type=str(c.get("type") or "function"),
            )
        )
    return tuple(calls)


def read_message(m: Mapping[str, Any]) -> Message:
    """A wire chat message as a canonical :class:`Message`."""
    role = m.get("role", "user")
    if role == "function":  # the deprecated function-calling role answers a call by name
        return Message(role="tool", content=content_text(m.get("content")), name=m.get("name"))
    return Message(
        role=role if role in ("user", "assistant", "tool") else "user",
        content=content_text(m.get("content")),
        tool_calls=_tool_calls(m.get("tool_calls")),
        tool_call_id=m.get("tool_call_id"),
        name=m.get("name"),
    )


def write_message(m: Message) -> dict[str, Any]:
    """A canonical message as a wire chat message."""
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        out["content"] = m.content or None
        out["tool_calls"] = [
            {"id": c.id, "type": c.type, "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    return out


def read_usage(u: Mapping[str, Any] | None) -> Usage:
    """Chat Completions usage as :class:`Usage`."""
    if not u:
        return Usage()
    details = u.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=u.get("prompt_tokens"),
        output_tokens=u.get("completion_tokens"),
        cached_input_tokens=details.get("cached_tokens"),
    )


class ChatCompletionsProtocol:
    """OpenAI Chat Completions, also spoken by many OpenAI-compatible servers."""

    name = "openai.chat"
    provider = "openai"
    operation = "chat"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Conversation messages, system/developer text, model and stream flag."""
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
        """The app's leading system messages (a known agent's anchored blocks inside), then
        ``session_init`` blocks, the history, ``per_turn`` blocks, then the rest. With a
        prompt cache key (:func:`uses_prompt_cache`) the per-turn blocks are one system
        message at the very end instead, after everything the cache can hold."""
        out = dict(body)
        out["messages"] = layout_messages(
            list(body.get("messages") or ()),
            plan,
            is_system=_is_system,
            write_message=write_message,
            system_message=_system_message,
            cached=uses_prompt_cache(body),
        )
        return out

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Ask for the usage chunk unless the caller said anything about it."""
        if not body.get("stream"):
            return None
        options = body.get("stream_options")
        if isinstance(options, Mapping) and "include_usage" in options:
            return None
        out = dict(body)
        out["stream_options"] = {**(options or {}), "include_usage": True}
        return out

    def is_hidden_usage_event(self, event: Any) -> bool:
        """The usage-only chunk (no choices) that ``include_usage`` adds."""
        if isinstance(event, Mapping):
            return not event.get("choices") and event.get("usage") is not None
        return not getattr(event, "choices", None) and getattr(event, "usage", None) is not None

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The first choice's message, every choice's finish reason, usage and model."""
        choices = sorted(data.get("choices") or (), key=lambda c: c.get("index", 0))
        messages = []
        if choices:
            msg = dict(choices[0].get("message") or {})
            msg.setdefault("role", "assistant")
            messages.append(read_message(msg))
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[c["finish_reason"] for c in choices if c.get("finish_reason")],
            model=data.get("model"),
        )

    def new_accumulator(self) -> ChatStreamAccumulator:
        """A fresh accumulator for a ``chat.completion.chunk`` stream."""
        return ChatStreamAccumulator()


def uses_prompt_cache(body: Mapping[str, Any]) -> bool:
    """Whether an OpenAI request says it relies on the (automatic) prompt cache: it names a
    ``prompt_cache_key`` or a ``prompt_cache_retention``, as agents such as Codex do. Then
    text that changes every turn must come after the conversation, not before it."""
    return "prompt_cache_key" in body or "prompt_cache_retention" in body


def _is_system(m: Any) -> bool:
    return isinstance(m, Mapping) and m.get("role") in SYSTEM_ROLES


def _system_message(blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": render_blocks(blocks)}] if blocks else []


class ChatStreamAccumulator:
    """Rebuilds a chat completion from its chunks (first choice's text and tool calls)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: dict[int, str] = {}
        self.usage: Mapping[str, Any] | None = None
        self.model: str | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one chunk."""
        self.model = event.get("model") or self.model
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get("choices") or ():
            index = choice.get("index", 0)
            if choice.get("finish_reason"):
                self.finish[index] = choice["finish_reason"]
            if index != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            for tc in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["arguments"] += fn["arguments"]

    def result(self) -> ResponseView:
        """The message so far."""
        calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
            for _, c in sorted(self.calls.items())
        )
        text = "".join(self.text)
        messages = [Message(role="assistant", content=text, tool_calls=calls)] if text or calls else []
        return ResponseView(
            messages=messages,
            usage=read_usage(self.usage),
            finish_reasons=[r for _, r in sorted(self.finish.items())],
            model=self.model,
        )
