"""Where injected items go in a chat-style message list, for every protocol that carries
system text as messages (OpenAI Chat Completions and the many APIs shaped like it).

The order is: the app's leading system messages (its instructions stay first), the
``session_init`` blocks (stable within a session: part of the cached prefix), the history,
the ``per_turn`` blocks (late, so they do not break a cached prefix), then the app's other
messages. Each protocol supplies its own notion of a system message and its wire forms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .model import Message
from .wire import InjectionPlan, SystemBlock


def leading_count(messages: Sequence[Any], is_system: Callable[[Any], bool]) -> int:
    """How many of ``messages`` are the app's leading system messages."""
    n = 0
    for m in messages:
        if not is_system(m):
            break
        n += 1
    return n


def layout_messages(
    messages: Sequence[Any],
    plan: InjectionPlan,
    *,
    is_system: Callable[[Any], bool],
    write_message: Callable[[Message], Any],
    system_message: Callable[[Sequence[SystemBlock]], list[Any]],
    history: bool = True,
) -> list[Any]:
    """``messages`` with the plan's blocks and history in place (see the module docstring).

    ``system_message`` renders blocks as zero or more wire messages; ``history=False``
    leaves the history out (the server holds the conversation). The app's items are kept
    as the very objects it passed.
    """
    lead = leading_count(messages, is_system)
    stable = [b for b in plan.system_blocks if b.cache == "session_init"]
    volatile = [b for b in plan.system_blocks if b.cache != "session_init"]
    return [
        *messages[:lead],
        *system_message(stable),
        *([write_message(m) for m in plan.history] if history else []),
        *system_message(volatile),
        *messages[lead:],
    ]
