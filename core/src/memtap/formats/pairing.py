"""Keeping tool calls paired with their results when injected history is trimmed.

Providers that take a conversation as turns of alternating roles (Anthropic Messages,
Gemini ``generateContent``) reject a tool result whose call is not in the turn before it,
and a call left unanswered. Injected history is cut to a budget, so its first turns may
answer calls that were cut, and its last ones may call tools the app's own messages do not
answer: :func:`trim_unpaired` drops those, the same way for every such format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["trim_unpaired"]


def trim_unpaired(
    turns: list[dict[str, Any]],
    following: Any,
    *,
    next_role: str | None,
    call_ids: Callable[[Mapping[str, Any]], set[str]],
    result_ids: Callable[[Any], set[str]],
    keep_answered_lead: bool = False,
) -> list[dict[str, Any]]:
    """``turns`` (wire turns with a ``role``, same-role turns already merged) trimmed to
    stand before ``following`` (the app's first turn, or ``None``), in place: the first is
    a ``user`` turn carrying no tool results, and the last neither has ``next_role`` (the
    role of ``following``) nor calls a tool that ``following`` does not answer; a turn of
    results dropped at the end takes the turn with their calls along. ``call_ids`` and
    ``result_ids`` read the ids of a turn's tool calls and results (``result_ids`` also of
    ``following``, whatever it is). With ``keep_answered_lead``, a last remaining turn whose
    calls ``following`` answers is kept even though it is not the user's (the app's own
    results need it)."""
    answered = result_ids(following)
    while turns and (turns[0]["role"] != "user" or result_ids(turns[0])):
        if keep_answered_lead and len(turns) == 1 and call_ids(turns[0]) & answered:
            break
        turns.pop(0)
    while turns:
        last = turns[-1]
        if last["role"] == next_role or (call_ids(last) - answered):
            turns.pop()
            if result_ids(last) and turns:
                turns.pop()  # the results' call would be left unanswered
            continue
        break
    return turns
