"""The OpenAI Chat Completions message format, shared by every protocol that speaks it.

OpenAI's ``/v1/chat/completions``, litellm's ``completion`` arguments and answers, and the
many OpenAI-compatible servers all carry the same messages, usage, choices and stream
chunks. This module reads and writes that shape once, for ``memtap-openai``,
``memtap-litellm`` and third-party plugins; what differs between them (how a request says
it uses a prompt cache, where per-turn blocks go) stays in each plugin's protocol.

Messages and tool calls may be mappings or objects with ``model_dump()`` (litellm and
pydantic message objects an app appends as they are): both are read (:func:`as_mapping`);
nothing read is modified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memtap.formats.blocks import render_blocks
from memtap.formats.content import content_text
from memtap.formats.layout import MessageCodec, layout_messages
from memtap.protocol.model import Message, ToolCall, Usage
from memtap.protocol.wire import BaseWireProtocol, InjectionPlan, RequestView, ResponseView, SystemBlock

__all__ = [
    "CHAT_CODEC",
    "SYSTEM_ROLES",
    "ChatCodec",
    "ChatFormatProtocol",
    "ChatStreamAccumulator",
    "as_mapping",
    "is_hidden_usage_event",
    "is_system_message",
    "read_chat_request",
    "read_chat_response",
    "read_message",
    "read_tool_calls",
    "read_usage",
    "request_stream_usage",
    "system_message",
    "write_message",
]

#: Roles whose messages are system text, not conversation.
SYSTEM_ROLES = frozenset({"system", "developer"})


def as_mapping(obj: Any) -> Mapping[str, Any] | None:
    """A message (or tool call, usage...) as a mapping: mappings as they are, objects with
    ``model_dump()`` dumped, anything else ``None``."""
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is not None:
        try:
            data = dump()
        except Exception:
            return None
        return data if isinstance(data, Mapping) else None
    return None


def read_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """A message's ``tool_calls`` as canonical :class:`ToolCall` objects."""
    calls = []
    for item in raw or ():
        c = as_mapping(item)
        if c is None:
            continue
        fn = as_mapping(c.get("function")) or {}
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
    """A chat message as a canonical :class:`Message` (the deprecated ``function`` role,
    which answers a call by name, as a tool message)."""
    role = m.get("role")
    if role == "function":
        return Message(role="tool", content=content_text(m.get("content")), name=m.get("name"))
    return Message(
        role=role if role == "assistant" or role == "tool" else "user",
        content=content_text(m.get("content")),
        tool_calls=read_tool_calls(m.get("tool_calls")),
        tool_call_id=m.get("tool_call_id"),
        name=m.get("name"),
    )


def write_message(m: Message) -> dict[str, Any]:
    """A canonical message as a chat message."""
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


def read_usage(u: Any) -> Usage:
    """Chat usage (``prompt_tokens``, ``completion_tokens``, cached prompt tokens)."""
    data = as_mapping(u)
    if not data:
        return Usage()
    details = as_mapping(data.get("prompt_tokens_details")) or {}
    return Usage(
        input_tokens=data.get("prompt_tokens"),
        output_tokens=data.get("completion_tokens"),
        cached_input_tokens=details.get("cached_tokens"),
    )


def is_system_message(item: Any) -> bool:
    """Whether a request's message carries system text (``system``/``developer``)."""
    m = as_mapping(item)
    return m is not None and m.get("role") in SYSTEM_ROLES


def system_message(blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
    """memtap's blocks as one system message (none without blocks)."""
    return [{"role": "system", "content": render_blocks(blocks)}] if blocks else []


class ChatCodec(MessageCodec):
    """The chat format for :func:`memtap.formats.layout.layout_messages`: system/developer
    messages, :func:`write_message`, blocks as one system message, messages read through
    :func:`as_mapping` (message objects too)."""

    def is_system_message(self, item: Any) -> bool:
        """See :func:`is_system_message`."""
        return is_system_message(item)

    def write_message(self, message: Message) -> dict[str, Any]:
        """See :func:`write_message`."""
        return write_message(message)

    def system_message(self, blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
        """See :func:`system_message`."""
        return system_message(blocks)

    def as_mapping(self, item: Any) -> Mapping[str, Any] | None:
        """See :func:`as_mapping`."""
        return as_mapping(item)


#: The chat format's codec.
CHAT_CODEC = ChatCodec()


def read_chat_request(body: Mapping[str, Any]) -> RequestView:
    """Conversation messages, system/developer text, model and stream flag of a request."""
    system: list[str] = []
    messages: list[Message] = []
    for item in body.get("messages") or ():
        m = as_mapping(item)
        if m is None:
            continue
        if m.get("role") in SYSTEM_ROLES:
            system.append(content_text(m.get("content")))
        else:
            messages.append(read_message(m))
    model = body.get("model")
    return RequestView(
        messages=messages,
        system="\n\n".join(system) if system else None,
        model=model if isinstance(model, str) else None,
        stream=bool(body.get("stream")),
    )


def request_stream_usage(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """A streamed request that also asks for the usage chunk, unless the caller said
    anything about it (``None``: leave the request as it is)."""
    if not body.get("stream"):
        return None
    options = body.get("stream_options")
    if isinstance(options, Mapping) and "include_usage" in options:
        return None
    out = dict(body)
    out["stream_options"] = {**(options or {}), "include_usage": True}
    return out


def is_hidden_usage_event(event: Any) -> bool:
    """The usage-only chunk (no choices) that ``include_usage`` adds."""
    if isinstance(event, Mapping):
        return not event.get("choices") and event.get("usage") is not None
    return not getattr(event, "choices", None) and getattr(event, "usage", None) is not None


def read_chat_response(data: Mapping[str, Any]) -> ResponseView:
    """The first choice's message, every choice's finish reason, usage and model."""
    choices = sorted(data.get("choices") or (), key=lambda c: c.get("index", 0))
    messages = []
    if choices:
        msg = dict(choices[0].get("message") or {})
        msg["role"] = msg.get("role") or "assistant"
        messages.append(read_message(msg))
    return ResponseView(
        messages=messages,
        usage=read_usage(data.get("usage")),
        finish_reasons=[c["finish_reason"] for c in choices if c.get("finish_reason")],
        model=data.get("model"),
    )


class ChatStreamAccumulator:
    """Rebuilds an answer from its streamed deltas: the first choice's text and tool calls,
    every choice's finish reason, usage, model.

    :meth:`feed` reads OpenAI-style chunks (``chat.completion.chunk`` by default); what
    differs between the formats that stream so is a parameter: ``read_usage`` (the usage
    object as :class:`Usage`), ``choices`` (the key of a chunk's list of choices: xAI's
    ``outputs``), ``whole_tool_calls`` (each tool call arrives whole, without an ``index``:
    every one is a new call) and ``empty_arguments`` (the arguments of a call that streamed
    none). A format whose events look otherwise (Bedrock's ``contentBlockDelta``...)
    overrides :meth:`feed` and hands over what each event holds with :meth:`add_text`,
    :meth:`add_call`, :meth:`set_finish_reason` and :attr:`usage`; :meth:`result` is the
    same for all.
    """

    def __init__(
        self,
        read_usage: Callable[[Any], Usage] = read_usage,
        *,
        choices: str = "choices",
        whole_tool_calls: bool = False,
        empty_arguments: str = "",
    ) -> None:
        self.read_usage = read_usage
        self.choices = choices
        self.whole_tool_calls = whole_tool_calls
        self.empty_arguments = empty_arguments
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: dict[int, str] = {}
        #: The latest usage object the stream carried (read by ``read_usage`` at the end).
        self.usage: Any = None
        self.model: str | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one chunk."""
        self.model = event.get("model") or self.model
        if event.get("usage"):
            self.usage = event["usage"]
        for choice in event.get(self.choices) or ():
            index = choice.get("index", 0)
            if choice.get("finish_reason"):
                self.set_finish_reason(index, choice["finish_reason"])
            if index != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.add_text(str(delta["content"]))
            for tc in delta.get("tool_calls") or ():
                fn = tc.get("function") or {}
                self.add_call(
                    None if self.whole_tool_calls else tc.get("index") or 0,
                    id=str(tc.get("id") or ""),
                    name=str(fn.get("name") or ""),
                    arguments=str(fn.get("arguments") or ""),
                )

    def add_text(self, text: str) -> None:
        """Append to the answer's text."""
        self.text.append(text)

    def add_call(self, index: int | None, *, id: str = "", name: str = "", arguments: str = "") -> None:
        """A tool call's delta: at ``index`` (``None``: a new call after the others) its id
        is set (when given), its name and arguments extended."""
        if index is None:
            index = max(self.calls, default=-1) + 1
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if id:
            slot["id"] = id
        slot["name"] += name
        slot["arguments"] += arguments

    def set_finish_reason(self, index: int, reason: str) -> None:
        """Choice ``index`` finished for ``reason``."""
        self.finish[index] = reason

    def result(self) -> ResponseView:
        """The answer so far."""
        calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or self.empty_arguments)
            for _, c in sorted(self.calls.items())
        )
        text = "".join(self.text)
        messages = [Message(role="assistant", content=text, tool_calls=calls)] if text or calls else []
        return ResponseView(
            messages=messages,
            usage=self.read_usage(self.usage),
            finish_reasons=[r for _, r in sorted(self.finish.items())],
            model=self.model,
        )


class ChatFormatProtocol(BaseWireProtocol):
    """A wire protocol that speaks the chat format, with the usual defaults: requests,
    responses, the usage chunk, stream accumulation, and injection as
    :func:`~memtap.formats.layout.layout_messages` lays out a chat message list. A subclass
    adds ``name`` and ``provider``, and overrides ``inject`` where its provider places
    blocks otherwise (behind a prompt cache, as OpenAI's ``prompt_cache_key`` says)."""

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Conversation messages, system/developer text, model and stream flag."""
        return read_chat_request(body)

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """A new body whose ``messages`` are the app's leading system messages (a known
        agent's anchored blocks inside), ``session_init`` blocks, the history, ``per_turn``
        blocks, then the app's other messages; nothing else changes."""
        out = dict(body)
        out["messages"] = layout_messages(list(body.get("messages") or ()), plan, CHAT_CODEC)
        return out

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Ask for the usage chunk unless the caller said anything about it."""
        return request_stream_usage(body)

    def is_hidden_usage_event(self, event: Any) -> bool:
        """The usage-only chunk (no choices) that ``include_usage`` adds."""
        return is_hidden_usage_event(event)

    def caller_event(self, event: Any) -> Any:
        """A chunk as the caller would have got it had memtap not asked for usage (a
        :data:`~memtap.adapters.streamtap.EventFilter`): the usage-only chunk hidden
        (``None``); the ``usage: null`` every other chunk then carries removed from a
        mapping, or, on an SDK's pydantic object, unmarked as set (so its ``to_dict()``
        and ``model_fields_set`` are what they would have been)."""
        if is_hidden_usage_event(event):
            return None
        if isinstance(event, Mapping):
            if "usage" in event and event["usage"] is None:
                return {k: v for k, v in event.items() if k != "usage"}
            return event
        if getattr(event, "usage", 0) is None:
            fields_set = getattr(event, "__pydantic_fields_set__", None)
            if fields_set is not None:
                fields_set.discard("usage")
        return event

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The first choice's message, every choice's finish reason, usage and model."""
        return read_chat_response(data)

    def new_accumulator(self) -> ChatStreamAccumulator:
        """A fresh accumulator for a ``chat.completion.chunk`` stream."""
        return ChatStreamAccumulator()
