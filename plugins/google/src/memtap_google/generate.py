"""The Gemini ``generateContent`` wire protocol (``POST .../models/{model}:generateContent``
and ``:streamGenerateContent``), in the camelCase JSON form google-genai sends.

Gemini bodies name no model (it is in the URL): the in-process adapter records it under
``model`` next to the body it captures, and never sends that key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.sdk import (
    BaseWireProtocol,
    InjectionPlan,
    Message,
    RequestView,
    ResponseView,
    ToolCall,
    Usage,
    arrange,
    content_texts,
    last_index,
    trim_unpaired,
    with_system,
)

from .arraystream import JSONArrayStream

#: Keys of the system instruction: the SDK sends camelCase; the REST API also takes snake_case.
SYSTEM_KEYS = ("systemInstruction", "system_instruction")
#: Keys naming an explicit context cache: the request may then carry no system instruction.
CACHED_CONTENT_KEYS = ("cachedContent", "cached_content")


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _contents(value: Any) -> list[Any]:
    """``contents`` as a list of Content objects (the REST shorthand forms accepted)."""
    if value is None:
        return []
    if isinstance(value, (str, Mapping)):
        value = [value]
    out: list[Any] = []
    for item in value:
        if isinstance(item, str):
            out.append({"role": "user", "parts": [{"text": item}]})
        elif isinstance(item, Mapping) and "parts" not in item and "role" not in item:
            out.append({"role": "user", "parts": [item]})  # a bare part
        else:
            out.append(item)
    return out


def _parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"text": content}]
    if not isinstance(content, Mapping):
        return []
    parts = content.get("parts")
    if isinstance(parts, (str, Mapping)):
        parts = [parts]
    return [{"text": p} if isinstance(p, str) else p for p in parts or () if isinstance(p, (str, Mapping))]


def _marker(part: Mapping[str, Any]) -> str | None:
    """A ``[kind]`` marker for a non-text part (payloads are never stored)."""
    for camel, snake in (("inlineData", "inline_data"), ("fileData", "file_data")):
        data = _get(part, camel, snake)
        if isinstance(data, Mapping):
            mime = str(_get(data, "mimeType", "mime_type") or "")
            kind = mime.split("/", 1)[0]
            return f"[{kind if kind in ('image', 'audio', 'video') else 'file'}]"
    for camel, snake in (
        ("executableCode", "executable_code"),
        ("codeExecutionResult", "code_execution_result"),
    ):
        if _get(part, camel, snake) is not None:
            return f"[{snake}]"
    return None


#: The ids a client makes up for a call the API sent without one: Gemini CLI's
#: ``{name}_{epoch ms}_{n}`` and ``synth_{prompt id}_{epoch ms}_{n}``.
_MADE_UP_ID = re.compile(r"(?:synth_.+|(?P<name>.+))_\d{12,}_\d+")


def _made_up(given: str, name: str) -> bool:
    match = _MADE_UP_ID.fullmatch(given)
    return match is not None and match.group("name") in (None, name)


def call_id(call: Mapping[str, Any]) -> str:
    """A function call's id; Gemini may send none, then its name stands in (so a call and
    its response, which carries the same name, still pair up). An id the client made up
    for a call the API sent without one (Gemini CLI's) is not the call's either: the
    answer memtap captured had none, and the client's resent conversation must match it."""
    name = str(call.get("name") or "")
    given = call.get("id")
    if given and not _made_up(str(given), name):
        return str(given)
    return name or str(given or "")


def _arguments(args: Any) -> str:
    return json.dumps(args if args is not None else {}, ensure_ascii=False)


def _read_content(content: Any) -> list[Message]:
    """One Content as canonical messages: text and function calls of the model; function
    responses (first) and text of the user."""
    role = content.get("role") if isinstance(content, Mapping) else None
    text: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for part in _parts(content):
        if part.get("thought"):
            continue  # the model's reasoning is not conversation text
        call = _get(part, "functionCall", "function_call")
        response = _get(part, "functionResponse", "function_response")
        if isinstance(call, Mapping):
            calls.append(
                ToolCall(
                    id=call_id(call), name=str(call.get("name") or ""), arguments=_arguments(call.get("args"))
                )
            )
        elif isinstance(response, Mapping):
            result = Message(
                role="tool",
                tool_call_id=call_id(response),
                name=str(response.get("name") or "") or None,
                content=_arguments(response.get("response")),
            )
            # One answer to one call, even sent twice (Gemini CLI's resumed sessions do).
            if result not in results:
                results.append(result)
        elif isinstance(part.get("text"), str):
            text.append(part["text"])
        else:
            marker = _marker(part)
            if marker:
                text.append(marker)
    if role == "model":
        return [Message(role="assistant", content="".join(text), tool_calls=calls)]
    if text or not results:
        results.append(Message(role="user", content="\n".join(text)))
    return results


def read_contents(contents: Any) -> list[Message]:
    """``contents`` as canonical messages; consecutive turns of one role are one turn (a
    chat resends a streamed answer as one Content per chunk)."""
    out: list[Message] = []
    for content in _contents(contents):
        for m in _read_content(content):
            last = out[-1] if out else None
            if last is not None and last.role == m.role == "assistant":
                out[-1] = Message(
                    role="assistant",
                    content=last.content + m.content,
                    tool_calls=(*last.tool_calls, *m.tool_calls),
                )
            elif last is not None and last.role == m.role == "user":
                out[-1] = Message(role="user", content="\n".join(t for t in (last.content, m.content) if t))
            else:
                out.append(m)
    return out


def _function_call(call: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        args = {}
    body: dict[str, Any] = {"name": call.name, "args": args if isinstance(args, dict) else {}}
    if call.id and call.id != call.name:
        body["id"] = call.id
    return {"functionCall": body}


def _function_response(m: Message, names: Mapping[str, str]) -> dict[str, Any]:
    try:
        response = json.loads(m.content)
    except ValueError:
        response = None
    if not isinstance(response, dict):
        response = {"result": m.content}
    name = m.name or names.get(m.tool_call_id or "", m.tool_call_id or "")
    body: dict[str, Any] = {"name": name, "response": response}
    if m.tool_call_id and m.tool_call_id != name:
        body["id"] = m.tool_call_id
    return {"functionResponse": body}


def _call_ids(content: Mapping[str, Any]) -> set[str]:
    return {call_id(p["functionCall"]) for p in content["parts"] if "functionCall" in p}


def _response_ids(content: Any) -> set[str]:
    return {
        call_id(r)
        for p in _parts(content)
        if isinstance(r := _get(p, "functionResponse", "function_response"), Mapping)
    }


def write_history(history: Sequence[Message], following: Any) -> list[dict[str, Any]]:
    """Canonical history as Contents that may stand before ``following`` (the app's first
    Content, or ``None``): roles alternate (same-role turns merged), the first is the user's,
    and a function call is never separated from its response."""
    names = {c.id: c.name for m in history for c in m.tool_calls}
    out: list[dict[str, Any]] = []
    for m in history:
        if m.role == "tool":
            role, parts = "user", [_function_response(m, names)]
        elif m.role == "assistant":
            role = "model"
            parts = ([{"text": m.content}] if m.content else []) + [_function_call(c) for c in m.tool_calls]
        else:
            role, parts = "user", [{"text": m.content}] if m.content else []
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "parts": [*out[-1]["parts"], *parts]}
        else:
            out.append({"role": role, "parts": parts})
    return trim_unpaired(
        out,
        following,
        next_role=following.get("role", "user") if isinstance(following, Mapping) else None,
        call_ids=_call_ids,
        result_ids=_response_ids,
    )


def read_usage(u: Mapping[str, Any] | None) -> Usage:
    """``usageMetadata`` as :class:`Usage`: output tokens include thinking tokens."""
    if not u:
        return Usage()
    output = u.get("candidatesTokenCount")
    thoughts = u.get("thoughtsTokenCount")
    if thoughts is not None:
        output = (output or 0) + thoughts
    return Usage(
        input_tokens=u.get("promptTokenCount"),
        output_tokens=output,
        cached_input_tokens=u.get("cachedContentTokenCount"),
    )


def _system_text(value: Any) -> str | None:
    if value is None:
        return None
    texts = [p["text"] for p in _parts(value) if isinstance(p.get("text"), str)]
    return "\n\n".join(texts) or None


class GenerateContentProtocol(BaseWireProtocol):
    """Gemini ``generateContent`` / ``streamGenerateContent`` (streams always report
    ``usageMetadata``: the base's stream-usage defaults hold)."""

    name = "google.generate_content"
    provider = "gcp.gemini"

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """``contents`` as messages, the system instruction, and the model (when recorded)."""
        system = next((body[k] for k in SYSTEM_KEYS if body.get(k) is not None), None)
        model = body.get("model")
        return RequestView(
            messages=read_contents(body.get("contents")),
            system=_system_text(system),
            model=str(model).removeprefix("models/") if model else None,
        )

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """History as Contents before the app's; system blocks anchored in a known agent's
        system instruction, else as one more part of it (a string one stays a string, the
        text after a blank line). A request on ``cachedContent`` may not set a system
        instruction: its blocks go into the latest user Content as one more text part."""
        out = dict(body)
        own = _contents(body.get("contents"))
        history = write_history(plan.history, own[0] if own else None)
        contents = history + own if history else None
        if plan.system_blocks:
            on_cache = any(body.get(k) for k in CACHED_CONTENT_KEYS)
            key = next((k for k in SYSTEM_KEYS if k in body), SYSTEM_KEYS[0])
            system = body.get(key)
            parts = system if isinstance(system, str) or system is None else _parts(system)
            arranged = arrange(plan, content_texts(parts), system=not on_cache)
            tail = arranged.tail_text()
            if tail is not None:
                turns = contents if contents is not None else own
                index = last_index(turns, _is_user_content)
                if index is None and not on_cache:
                    arranged = arranged.tail_in_system()
                elif index is None:
                    contents = [*turns, {"role": "user", "parts": [_text_part(tail)]}]
                else:
                    contents = list(turns)
                    turn = contents[index]
                    contents[index] = {**turn, "parts": [*_parts(turn), _text_part(tail)]}
            placed = with_system(parts, arranged, _text_part, as_list=True)
            if placed is not parts:
                out[key] = {**system, "parts": placed} if isinstance(system, Mapping) else _as_system(placed)
        if contents is not None:
            out["contents"] = contents
        return out

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """The first candidate's content, every candidate's finish reason, usage, model."""
        candidates = sorted(data.get("candidates") or (), key=lambda c: c.get("index", 0))
        messages: list[Message] = []
        if candidates:
            content = dict(candidates[0].get("content") or {})
            content["role"] = "model"
            messages = [m for m in _read_content(content) if m.content or m.tool_calls]
        return ResponseView(
            messages=messages,
            usage=read_usage(data.get("usageMetadata")),
            finish_reasons=[c["finishReason"] for c in candidates if c.get("finishReason")],
            model=data.get("modelVersion"),
        )

    def new_accumulator(self) -> GenerateContentAccumulator:
        """A fresh accumulator for a ``streamGenerateContent`` stream."""
        return GenerateContentAccumulator(self)

    def new_array_stream(self) -> JSONArrayStream:
        """A reader of a ``streamGenerateContent`` answer sent without ``alt=sse`` (one JSON
        array, streamed): it hands back each element, a chunk for :meth:`new_accumulator`'s
        accumulator as the SSE form's events are, as soon as it is complete."""
        return JSONArrayStream()


def _text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def _as_system(placed: Any) -> Any:
    """A new system instruction: a string as it is, parts as a Content."""
    return placed if isinstance(placed, str) else {"parts": placed}


def _is_user_content(content: Any) -> bool:
    return isinstance(content, Mapping) and content.get("role", "user") in ("user", None)


class GenerateContentAccumulator:
    """Joins the chunks of a stream: the first candidate's parts in order, the last finish
    reasons, usage and model version."""

    def __init__(self, protocol: GenerateContentProtocol) -> None:
        self.protocol = protocol
        self.parts: list[Any] = []
        self.finish: dict[int, str] = {}
        self.usage: Mapping[str, Any] | None = None
        self.model: str | None = None

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one chunk."""
        self.model = event.get("modelVersion") or self.model
        if event.get("usageMetadata"):
            self.usage = event["usageMetadata"]
        for candidate in event.get("candidates") or ():
            index = candidate.get("index", 0)
            if candidate.get("finishReason"):
                self.finish[index] = candidate["finishReason"]
            if index == 0:
                self.parts.extend(_parts(candidate.get("content")))

    def result(self) -> ResponseView:
        """The response so far."""
        first: dict[str, Any] = {"index": 0, "content": {"role": "model", "parts": self.parts}}
        if 0 in self.finish:
            first["finishReason"] = self.finish[0]
        others = [{"index": i, "finishReason": r} for i, r in sorted(self.finish.items()) if i != 0]
        return self.protocol.read_response(
            {"candidates": [first, *others], "usageMetadata": self.usage, "modelVersion": self.model}
        )
