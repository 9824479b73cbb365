"""Where injected items go in a chat-style message list, for every protocol that carries
system text as messages (OpenAI Chat Completions and the many APIs shaped like it).

The order is: the app's leading system messages (its instructions stay first; a known
agent's anchored blocks are placed inside them), the ``session_init`` blocks (stable
within a session: part of the cached prefix), the history, the ``per_turn`` blocks, then
the app's other messages, and last the tail (:mod:`memtap.placement`: per-turn blocks when
the request uses the prompt cache, so they come after everything a cache could hold).
Each protocol supplies its own notion of a system message and its wire forms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .model import Message
from .placement import arrange, content_texts, regroup, split_cache, with_texts
from .wire import InjectionPlan, SystemBlock


def leading_count(messages: Sequence[Any], is_system: Callable[[Any], bool]) -> int:
    """How many of ``messages`` are the app's leading system messages."""
    n = 0
    for m in messages:
        if not is_system(m):
            break
        n += 1
    return n


def _as_dict(message: Any) -> Mapping[str, Any] | None:
    return message if isinstance(message, Mapping) else None


def layout_messages(
    messages: Sequence[Any],
    plan: InjectionPlan,
    *,
    is_system: Callable[[Any], bool],
    write_message: Callable[[Message], Any],
    system_message: Callable[[Sequence[SystemBlock]], list[Any]],
    history: bool = True,
    cached: bool = False,
    tail_message: Callable[[Sequence[SystemBlock]], list[Any]] | None = None,
    as_dict: Callable[[Any], Mapping[str, Any] | None] = _as_dict,
) -> list[Any]:
    """``messages`` with the plan's blocks and history in place (see the module docstring).

    ``system_message`` renders blocks as zero or more wire messages; ``tail_message``
    renders the tail (default: ``system_message``); ``history=False`` leaves the history
    out (the server holds the conversation); ``cached`` says the request uses the
    provider's prompt cache. ``as_dict`` reads a message as a mapping (for message objects).
    The app's items are kept as the very objects it passed, except a leading system
    message a block was placed inside (a copy with the new content).
    """
    lead = leading_count(messages, is_system)
    contents = [(as_dict(m) or {}).get("content") for m in messages[:lead]]
    texts = [content_texts(c) for c in contents]
    arranged = arrange(plan, [t for group in texts for t in group], cached=cached)
    head = list(messages[:lead])
    for i, (content, new) in enumerate(zip(contents, regroup(arranged.texts, [len(t) for t in texts]))):
        edited = with_texts(content, new)
        if edited is not content:
            head[i] = {**(as_dict(head[i]) or {}), "content": edited}
    stable, volatile = split_cache(arranged.tail)
    tail = (tail_message or system_message)([*stable, *volatile]) if arranged.tail else []
    return [
        *head,
        *system_message(arranged.stable),
        *([write_message(m) for m in plan.history] if history else []),
        *system_message(arranged.volatile),
        *messages[lead:],
        *tail,
    ]
