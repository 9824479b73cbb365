"""The providers' own validation of tool calls in a request, for the scripted model server.

A real provider rejects a conversation whose tool calls and tool results do not pair up, with
a 400 and a message that SDKs surface verbatim. :class:`~memtap.testing.server.ScriptedModelServer`
applies the same rules (with the same messages and error bodies), so a test against it fails
exactly where a real provider would: memtap must never inject a history that breaks them.

The rules, as the providers state and enforce them:

OpenAI Chat Completions (``/v1/chat/completions``)
    A ``tool`` message answers a call of the assistant message right before it (only other
    ``tool`` messages may stand between), and every ``tool_call_id`` of an assistant message
    with ``tool_calls`` is answered by those ``tool`` messages.

OpenAI Responses (``/v1/responses``)
    Every ``function_call`` item in ``input`` has a ``function_call_output`` with its
    ``call_id``, and every output answers a call in ``input`` (unless ``previous_response_id``
    holds the conversation on the server).

Anthropic Messages (``/v1/messages``)
    Every ``tool_use`` block of an assistant message is answered by a ``tool_result`` block at
    the start of the very next message (a user message; results come first in its content),
    every ``tool_result`` answers a ``tool_use`` of the message right before it, and no
    message is empty except a final assistant message (prefill). Messages are checked as sent,
    without merging consecutive turns of one role (the stricter reading). Role alternation
    and a leading user turn are no longer required by the API and are not checked.

Each check returns ``None`` for a valid body, else a :class:`Rejection`: the status and the
JSON error body in the provider's format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Rejection",
    "check_anthropic_messages",
    "check_openai_chat",
    "check_openai_responses",
    "check_request",
]


@dataclass(frozen=True)
class Rejection:
    """A request the provider refuses: HTTP ``status`` and the JSON error ``body``."""

    status: int
    body: dict[str, Any]

    @property
    def message(self) -> str:
        """The error message, as the SDK's exception shows it."""
        error = self.body.get("error") or {}
        return str(error.get("message", ""))


def _openai_error(message: str, param: str | None) -> Rejection:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return Rejection(400, {"error": error})


def _anthropic_error(message: str) -> Rejection:
    return Rejection(400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}})


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [m for m in value if isinstance(m, Mapping)] if isinstance(value, list) else []


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    return [str(c.get("id")) for c in _items(message.get("tool_calls"))]


def check_openai_chat(body: Mapping[str, Any]) -> Rejection | None:
    """Chat Completions: ``tool`` messages pair with the assistant ``tool_calls`` before them."""
    calls: list[str] = []  # the open assistant message's call ids
    pending: list[str] = []  # those not answered yet
    opened_at = -1
    for i, message in enumerate(_items(body.get("messages"))):
        role = message.get("role")
        if role == "tool":
            if opened_at < 0:
                return _openai_error(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            call_id = str(message.get("tool_call_id"))
            if call_id not in calls:
                return _openai_error(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of "
                    "previous message.",
                    f"messages.[{i}].tool_call_id",
                )
            if call_id in pending:
                pending.remove(call_id)
            continue
        if pending:
            return _unanswered_calls(opened_at, pending)
        calls, opened_at = [], -1
        if role == "assistant" and _call_ids(message):
            calls = _call_ids(message)
            pending = list(calls)
            opened_at = i
    if pending:
        return _unanswered_calls(opened_at, pending)
    return None


def _unanswered_calls(index: int, pending: Sequence[str]) -> Rejection:
    return _openai_error(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to "
        "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(pending),
        f"messages.[{index}].role",
    )


def check_openai_responses(body: Mapping[str, Any]) -> Rejection | None:
    """Responses: every ``function_call`` in ``input`` has its output, and every output its
    call (outputs may answer calls held by ``previous_response_id``)."""
    items = _items(body.get("input"))
    calls: list[str] = []
    answered: set[str] = set()
    for item in items:
        kind = item.get("type")
        call_id = str(item.get("call_id"))
        if kind == "function_call":
            calls.append(call_id)
        elif kind == "function_call_output":
            if call_id not in calls and not body.get("previous_response_id"):
                return _openai_error(
                    f"No tool call found for function call output with call_id {call_id}.", "input"
                )
            answered.add(call_id)
    for call_id in calls:
        if call_id not in answered:
            return _openai_error(f"No tool output found for function call {call_id}.", "input")
    return None


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _items(message.get("content"))


def _is_empty(content: Any) -> bool:
    return content is None or content == "" or content == []


def check_anthropic_messages(body: Mapping[str, Any]) -> Rejection | None:
    """Messages: each ``tool_use`` answered at the start of the next message, each
    ``tool_result`` answering the message before it, no empty message but a final
    assistant one."""
    messages = _items(body.get("messages"))
    last = len(messages) - 1
    for i, message in enumerate(messages):
        role = message.get("role")
        if _is_empty(message.get("content")) and not (i == last and role == "assistant"):
            return _anthropic_error(
                f"messages.{i}: all messages must have non-empty content except for the optional "
                "final assistant message"
            )
        blocks = _blocks(message)
        if role == "user" and i > 0:
            previous = messages[i - 1]
            uses = {str(b.get("id")) for b in _blocks(previous) if b.get("type") == "tool_use"}
            if previous.get("role") != "assistant":
                uses = set()
        else:
            uses = set()
        for j, block in enumerate(blocks):
            if block.get("type") == "tool_result" and str(block.get("tool_use_id")) not in uses:
                return _anthropic_error(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."
                )
        if role != "assistant":
            continue
        ids = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        if not ids:
            continue
        answered: set[str] = set()
        following = messages[i + 1] if i < last else None
        if following is not None and following.get("role") == "user":
            for block in _blocks(following):
                if block.get("type") != "tool_result":
                    break  # results must come first in the message
                answered.add(str(block.get("tool_use_id")))
        missing = [tool_id for tool_id in ids if tool_id not in answered]
        if missing:
            return _anthropic_error(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(missing)}. Each `tool_use` block must have a corresponding "
                "`tool_result` block in the next message."
            )
    return None


_CHECKS: dict[str, Callable[[Mapping[str, Any]], Rejection | None]] = {
    "/v1/chat/completions": check_openai_chat,
    "/v1/responses": check_openai_responses,
    "/v1/messages": check_anthropic_messages,
}


def check_request(path: str, body: Mapping[str, Any]) -> Rejection | None:
    """The provider's answer to a request body at ``path`` that breaks its tool-pairing rules
    (``None``: the body passes them, or the path has no such rules here)."""
    check = _CHECKS.get(path)
    return check(body) if check is not None else None
