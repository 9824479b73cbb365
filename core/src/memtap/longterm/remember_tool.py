"""Memorize, mode B: a ``remember`` tool the application gives its agent, and the
validation of the agent's calls to it (the handler lives on :class:`memtap.Memory`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from memtap.errors import MemtapError
from memtap.longterm.memorize import MAX_FACT_CHARS

TOOL_NAME = "remember"
DESCRIPTION = (
    "Save one durable fact about the user to long-term memory, so that it is known in later "
    "conversations: identity, preferences, relationships, possessions, plans, decisions. "
    'Write one short self-contained sentence in the third person ("The user is allergic to '
    'peanuts."). Do not save small talk, secrets or one-off task details. If the fact '
    "replaces something remembered earlier, pass that earlier fact's text as `replaces`."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "fact": {"type": "string", "description": "The fact, one sentence.", "maxLength": MAX_FACT_CHARS},
        "replaces": {
            "type": "string",
            "description": "Optional: the text of a remembered fact that is no longer true.",
            "maxLength": MAX_FACT_CHARS,
        },
    },
    "required": ["fact"],
    "additionalProperties": False,
}

ToolFormat = Literal["openai", "openai.responses", "anthropic"]


def memory_tool(fmt: ToolFormat = "openai") -> dict[str, Any]:
    """The ``remember`` tool definition: ``"openai"`` (Chat Completions ``tools``),
    ``"openai.responses"`` (Responses ``tools``) or ``"anthropic"`` (Messages ``tools``)."""
    params = json.loads(json.dumps(PARAMETERS))
    if fmt == "openai":
        return {
            "type": "function",
            "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": params},
        }
    if fmt == "openai.responses":
        return {"type": "function", "name": TOOL_NAME, "description": DESCRIPTION, "parameters": params}
    if fmt == "anthropic":
        return {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": params}
    raise ValueError(f"unknown tool format {fmt!r}; use 'openai', 'openai.responses' or 'anthropic'")


class MemoryToolError(MemtapError, ValueError):
    """The agent's tool arguments are invalid (the message is meant for the agent)."""


@attrs.frozen
class ToolCallArgs:
    """Validated arguments of one ``remember`` call."""

    fact: str
    replaces: str | None = None


def parse_tool_args(args: Mapping[str, Any] | str) -> ToolCallArgs:
    """Validate a ``remember`` call's arguments (a mapping, or the JSON text a provider
    sends); raise :class:`MemoryToolError` saying what is wrong."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            raise MemoryToolError(f"arguments are not JSON: {exc}") from exc
    if not isinstance(args, Mapping):
        raise MemoryToolError("arguments must be an object with a 'fact' string")
    extra = set(args) - {"fact", "replaces"}
    if extra:
        raise MemoryToolError(f"unknown argument(s): {', '.join(sorted(extra))}")
    fact, replaces = args.get("fact"), args.get("replaces")
    if not isinstance(fact, str) or not fact.strip():
        raise MemoryToolError("'fact' must be a non-empty string")
    if len(fact) > MAX_FACT_CHARS:
        raise MemoryToolError(f"'fact' must be at most {MAX_FACT_CHARS} characters")
    if replaces is not None and (not isinstance(replaces, str) or len(replaces) > MAX_FACT_CHARS):
        raise MemoryToolError(f"'replaces' must be a string of at most {MAX_FACT_CHARS} characters")
    return ToolCallArgs(fact=fact.strip(), replaces=(replaces or "").strip() or None)
