"""The ``litellm.chat`` wire protocol: litellm's OpenAI-shaped ``completion`` arguments and
responses.

litellm takes keyword arguments, not a JSON body, so the "body" this protocol reads and
edits is the call's keyword arguments without transport settings and credentials
(:func:`request_body`). Messages may be plain dicts or litellm/pydantic message objects (an
app often appends ``response.choices[0].message`` as it is); they are read through
``model_dump`` and never modified. The same code reads the OpenAI-shaped JSON that litellm's
``openai/`` provider puts on the wire.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.blocks import render_blocks
from memtap.content import content_text
from memtap.layout import layout_messages
from memtap.model import Message, ToolCall, Usage
from memtap.placement import marks
from memtap.wire import InjectionPlan, RequestView, ResponseView, SystemBlock

SYSTEM_ROLES = frozenset({"system", "developer"})

#: Keyword arguments that configure transport or carry credentials: never part of the body
#: memtap records (they are passed to litellm untouched).
TRANSPORT_KEYS = frozenset(
    {
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "organization",
        "headers",
        "extra_headers",
        "timeout",
        "client",
        "shared_session",
        "model_list",
        "litellm_logging_obj",
        "litellm_call_id",
        "litellm_trace_id",
        "mock_response",
        "deployment_id",
    }
)
_SECRET_MARKERS = ("key", "secret", "password", "credential", "token")


def is_transport_key(name: str) -> bool:
    """Whether keyword ``name`` is a transport setting or may carry a credential."""
    if name in TRANSPORT_KEYS or name.startswith("aws_") or name.startswith("vertex_"):
        return True
    if name.endswith("_tokens") or name == "max_tokens":
        return False
    return any(marker in name for marker in _SECRET_MARKERS)


def request_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a ``completion`` call's keyword arguments memtap reads and edits."""
    return {k: v for k, v in kwargs.items() if not is_transport_key(k)}


def as_mapping(obj: Any) -> Mapping[str, Any] | None:
    """A message (or tool call) as a mapping: dicts as they are, pydantic objects dumped."""
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


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
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
    """An OpenAI-shaped chat message as a canonical :class:`Message`."""
    role = m.get("role")
    if role == "function":
        return Message(role="tool", content=content_text(m.get("content")), name=m.get("name"))
    return Message(
        role=role if role == "assistant" or role == "tool" else "user",
        content=content_text(m.get("content")),
        tool_calls=_tool_calls(m.get("tool_calls")),
        tool_call_id=m.get("tool_call_id"),
        name=m.get("name"),
    )


def write_message(m: Message) -> dict[str, Any]:
    """A canonical message as an OpenAI-shaped chat message."""
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
    """OpenAI-shaped usage (``prompt_tokens``/``completion_tokens``) as :class:`Usage`."""
    data = as_mapping(u)
    if not data:
        return Usage()
    details = as_mapping(data.get("prompt_tokens_details")) or {}
    return Usage(
        input_tokens=data.get("prompt_tokens"),
        output_tokens=data.get("completion_tokens"),
        cached_input_tokens=details.get("cached_tokens"),
    )


def _is_system(item: Any) -> bool:
    m = as_mapping(item)
    return m is not None and m.get("role") in SYSTEM_ROLES


def _system_message(blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": render_blocks(blocks)}] if blocks else []


def _user_message(blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": render_blocks(blocks)}] if blocks else []


def uses_prompt_cache(body: Mapping[str, Any]) -> bool:
    """Whether a ``completion`` call uses prompt caching: ``cache_control`` on a message or
    one of its content parts or on a tool, or a ``prompt_cache_key``."""
    if "prompt_cache_key" in body or "prompt_cache_retention" in body:
        return True
    return marks("cache_control", body.get("messages"), body.get("tools"))


class LiteLLMChatProtocol:
    """litellm ``completion``/``acompletion``: OpenAI-shaped messages, any provider behind.

    ``provider`` is litellm's ``custom_llm_provider`` for the call (see :meth:`for_provider`);
    the protocol listed by the plugin says ``"litellm"``.
    """

    name = "litellm.chat"
    operation = "chat"

    def __init__(self, provider: str = "litellm") -> None:
        self.provider = provider

    def for_provider(self, provider: str | None) -> LiteLLMChatProtocol:
        """The same protocol reporting ``provider`` as ``gen_ai.provider.name``."""
        return _for_provider(provider or "litellm")

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Conversation messages, system/developer text, model and stream flag."""
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

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """The app's leading system messages (a known agent's anchored blocks inside),
        ``session_init`` blocks, the history, ``per_turn`` blocks, then the rest of the
        app's messages (objects kept as they are). With prompt caching in use
        (:func:`uses_prompt_cache`), per-turn blocks are one more *user* message at the end
        instead: litellm moves system messages into an Anthropic request's ``system`` (where
        text that changes every turn would break the cached prefix) but merges a trailing
        user message into the latest user turn, after its cache breakpoint."""
        out = dict(body)
        out["messages"] = layout_messages(
            list(body.get("messages") or ()),
            plan,
            is_system=_is_system,
            write_message=write_message,
            system_message=_system_message,
            cached=uses_prompt_cache(body),
            tail_message=_user_message,
            as_dict=as_mapping,
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
            msg["role"] = msg.get("role") or "assistant"
            messages.append(read_message(msg))
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[c["finish_reason"] for c in choices if c.get("finish_reason")],
            model=data.get("model"),
        )

    def new_accumulator(self) -> ChatStreamAccumulator:
        """A fresh accumulator for a stream of OpenAI-shaped chunks."""
        return ChatStreamAccumulator()


@functools.lru_cache(maxsize=256)
def _for_provider(provider: str) -> LiteLLMChatProtocol:
    return LiteLLMChatProtocol(provider)


class ChatStreamAccumulator:
    """Rebuilds a completion from its chunks (first choice's text and tool calls)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish: dict[int, str] = {}
        self.usage: Any = None
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
                slot = self.calls.setdefault(tc.get("index") or 0, {"id": "", "name": "", "arguments": ""})
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
