"""The OpenAI Responses wire protocol (``POST /v1/responses``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from memtap.sdk import (
    BaseWireProtocol,
    InjectionPlan,
    Message,
    RequestView,
    ResponseView,
    SystemBlock,
    ToolCall,
    Usage,
    arrange,
    content_text,
    content_texts,
    leading_count,
    regroup,
    render_blocks,
    with_system,
    with_texts,
)

from .chat import uses_prompt_cache

SYSTEM_ROLES = frozenset({"system", "developer"})
#: Body keys that make the server hold the conversation itself: no history is injected.
SERVER_STATE_KEYS = ("previous_response_id", "conversation")


def is_system_item(item: Any) -> bool:
    """Whether an input item is a system or developer message."""
    return (
        isinstance(item, Mapping)
        and item.get("type", "message") == "message"
        and item.get("role") in SYSTEM_ROLES
    )


def system_items(blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
    """memtap's blocks as one system message item (none without blocks)."""
    return [{"role": "system", "content": render_blocks(blocks)}] if blocks else []


def read_items(items: Any) -> tuple[list[Message], list[str]]:
    """Input items as canonical messages (function calls grouped into one assistant
    message), and the system/developer texts among them."""
    if isinstance(items, str):
        return [Message(role="user", content=items)], []
    messages: list[Message] = []
    system: list[str] = []
    for item in items or ():
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            text = content_text(item.get("content"))
            if role in SYSTEM_ROLES:
                system.append(text)
            elif role in ("user", "assistant"):
                messages.append(Message(role=role, content=text))
        elif kind == "function_call":
            call = ToolCall(
                id=str(item.get("call_id") or ""),
                name=str(item.get("name") or ""),
                arguments=str(item.get("arguments") or ""),
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                messages[-1] = Message(
                    role="assistant", content=last.content, tool_calls=(*last.tool_calls, call)
                )
            else:
                messages.append(Message(role="assistant", tool_calls=(call,)))
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                Message(role="tool", tool_call_id=item.get("call_id"), content=content_text(output))
            )
    return messages, system


def write_items(m: Message) -> list[dict[str, Any]]:
    """A canonical message as Responses input items."""
    if m.role == "tool":
        return [{"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.content}]
    out: list[dict[str, Any]] = []
    if m.content or not m.tool_calls:
        out.append({"role": m.role, "content": m.content})
    for c in m.tool_calls:
        out.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
    return out


def read_usage(u: Mapping[str, Any] | None) -> Usage:
    """Responses usage as :class:`Usage`."""
    if not u:
        return Usage()
    details = u.get("input_tokens_details") or {}
    return Usage(
        input_tokens=u.get("input_tokens"),
        output_tokens=u.get("output_tokens"),
        cached_input_tokens=details.get("cached_tokens"),
    )


class ResponsesProtocol(BaseWireProtocol):
    """OpenAI Responses (streams always end with usage: the base's stream-usage defaults hold)."""

    name = "openai.responses"
    provider = "openai"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """``input`` items as messages; ``instructions`` and system items as system text."""
        messages, system = read_items(body.get("input"))
        if isinstance(body.get("instructions"), str):
            system.insert(0, body["instructions"])
        return RequestView(
            messages=messages,
            system="\n\n".join(system) if system else None,
            model=body.get("model"),
            stream=bool(body.get("stream")),
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """The plan's items after the app's own system text, which is ``instructions`` and
        the system/developer items that open ``input`` (Codex sends its instructions as
        developer items): blocks anchored in a known agent's system texts; the others, and
        the history (not when the server keeps the conversation: ``previous_response_id``
        or ``conversation``), right after the leading system items (``session_init``
        blocks, the history, then per-turn blocks), or at the end of ``instructions`` when
        ``input`` opens with none; with a prompt cache key, per-turn blocks as one system
        message after the last input item. A string ``input`` becomes the equivalent
        one-item list when items go with it.
        """
        out = dict(body)
        items = body.get("input")
        own = [{"role": "user", "content": items}] if isinstance(items, str) else list(items or ())
        history: list[dict[str, Any]] = []
        if plan.history and not any(body.get(k) for k in SERVER_STATE_KEYS):
            history = [i for m in plan.history for i in write_items(m)]
        lead = leading_count(own, is_system_item)
        head = own[:lead]
        before: list[dict[str, Any]] = []  # session blocks, before the history
        after: list[dict[str, Any]] = []  # per-turn blocks, after it
        tail: list[dict[str, Any]] = []
        if plan.system_blocks:
            instructions = body.get("instructions")
            first = [instructions] if isinstance(instructions, str) else []
            contents = [item.get("content") for item in head]
            groups = [first, *(content_texts(c) for c in contents)]
            arranged = arrange(plan, [t for g in groups for t in g], cached=uses_prompt_cache(body))
            placed = regroup(arranged.texts, [len(g) for g in groups])
            for i, (content, texts) in enumerate(zip(contents, placed[1:])):
                edited = with_texts(content, texts)
                if edited is not content:
                    head[i] = {**head[i], "content": edited}
            if lead:
                before = system_items(arranged.stable)
                after = system_items(arranged.volatile)
                arranged = attrs.evolve(arranged, stable=(), volatile=())
            arranged = attrs.evolve(arranged, texts=tuple(placed[0]))
            system = with_system(instructions if first else None, arranged)
            if system is not (instructions if first else None):
                out["instructions"] = system
            text = arranged.tail_text()
            if text is not None:
                tail = [{"role": "system", "content": text}]
        edited_head = any(a is not b for a, b in zip(head, own))
        if history or before or after or tail or edited_head:
            out["input"] = [*head, *before, *history, *after, *own[lead:], *tail]
        return out

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """Output text and function calls as one assistant message; status as finish reason."""
        text: list[str] = []
        calls: list[ToolCall] = []
        for item in data.get("output") or ():
            kind = item.get("type")
            if kind == "message":
                text.append(content_text(item.get("content")))
            elif kind == "function_call":
                calls.append(
                    ToolCall(
                        id=str(item.get("call_id") or ""),
                        name=str(item.get("name") or ""),
                        arguments=str(item.get("arguments") or ""),
                    )
                )
        joined = "".join(text)
        messages = [Message(role="assistant", content=joined, tool_calls=calls)] if joined or calls else []
        reason = data.get("status")
        incomplete = data.get("incomplete_details") or {}
        if incomplete.get("reason"):
            reason = incomplete["reason"]
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usage")),
            finish_reasons=[reason] if reason else [],
            model=data.get("model"),
        )

    def new_accumulator(self) -> ResponsesStreamAccumulator:
        """A fresh accumulator for a Responses event stream."""
        return ResponsesStreamAccumulator(self)


class ResponsesStreamAccumulator:
    """The final response from ``response.completed`` (or failed/incomplete); for a cut
    stream, the text deltas and finished items seen so far."""

    FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self, protocol: ResponsesProtocol) -> None:
        self.protocol = protocol
        self.final: Mapping[str, Any] | None = None
        self.items: list[Mapping[str, Any]] = []
        self.text: list[str] = []
        self.model: str | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one event."""
        kind = event.get("type")
        if kind in self.FINAL and isinstance(event.get("response"), Mapping):
            self.final = event["response"]
        elif kind == "response.created" and isinstance(event.get("response"), Mapping):
            self.model = event["response"].get("model")
        elif kind == "response.output_text.delta":
            self.text.append(str(event.get("delta") or ""))
        elif kind == "response.output_item.done" and isinstance(event.get("item"), Mapping):
            self.items.append(event["item"])

    def result(self) -> ResponseView:
        """The response so far."""
        if self.final is not None:
            return self.protocol.read_response(self.final)
        view = self.protocol.read_response({"output": self.items, "model": self.model})
        if view.messages or not self.text:
            return view
        return ResponseView(
            messages=[Message(role="assistant", content="".join(self.text))], model=self.model
        )
