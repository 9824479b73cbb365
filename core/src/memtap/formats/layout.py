"""Where injected items go in a chat-style message list, for every protocol that carries
system text as messages (OpenAI Chat Completions and the many APIs shaped like it).

The order is: the app's leading system messages (its instructions stay first; a known
agent's anchored blocks are placed inside them), the ``session_init`` blocks (stable
within a session: part of the cached prefix), the history, the ``per_turn`` blocks, then
the app's other messages, and last the tail (:mod:`memtap.formats.placement`: per-turn blocks when
the request uses the prompt cache, so they come after everything a cache could hold).
Each protocol supplies its format's notion of a system message and its wire forms as a
:class:`MessageCodec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memtap.formats.placement import arrange, content_texts, regroup, split_cache, with_texts
from memtap.protocol.model import Message
from memtap.protocol.wire import InjectionPlan, SystemBlock


def leading_count(messages: Sequence[Any], is_system: Callable[[Any], bool]) -> int:
    """How many of ``messages`` are the app's leading system messages."""
    n = 0
    for m in messages:
        if not is_system(m):
            break
        n += 1
    return n


class MessageCodec:
    """What :func:`layout_messages` needs of a chat-style message format: which of the
    app's items are system messages, and the wire forms of history and memory blocks.

    A format subclasses it and implements :meth:`is_system_message`, :meth:`write_message`
    and :meth:`system_message`; :meth:`tail_message` (the blocks at the very end) defaults
    to :meth:`system_message` and :meth:`as_mapping` to mappings as they are.
    :data:`memtap.formats.openai_chat.CHAT_CODEC` is the OpenAI chat format's.
    """

    def is_system_message(self, item: Any) -> bool:
        """Whether one of the app's items carries system text."""
        raise NotImplementedError

    def write_message(self, message: Message) -> Any:
        """A canonical history message as a wire message."""
        raise NotImplementedError

    def system_message(self, blocks: Sequence[SystemBlock]) -> list[Any]:
        """Memory blocks as zero or more wire messages (none without blocks)."""
        raise NotImplementedError

    def tail_message(self, blocks: Sequence[SystemBlock]) -> list[Any]:
        """The blocks that go after the app's messages (see :mod:`memtap.formats.placement`)."""
        return self.system_message(blocks)

    def as_mapping(self, item: Any) -> Mapping[str, Any] | None:
        """One of the app's items as a mapping (``None``: not one)."""
        return item if isinstance(item, Mapping) else None


def layout_messages(
    messages: Sequence[Any],
    plan: InjectionPlan,
    codec: MessageCodec,
    *,
    history: bool = True,
    cached: bool = False,
) -> list[Any]:
    """``messages`` with the plan's blocks and history in place (see the module docstring),
    in the wire forms of ``codec``.

    ``history=False`` leaves the history out (the server holds the conversation);
    ``cached`` says the request uses the provider's prompt cache. The app's items are kept
    as the very objects it passed, except a leading system message a block was placed
    inside (a copy with the new content).
    """
    lead = leading_count(messages, codec.is_system_message)
    contents = [(codec.as_mapping(m) or {}).get("content") for m in messages[:lead]]
    texts = [content_texts(c) for c in contents]
    arranged = arrange(plan, [t for group in texts for t in group], cached=cached)
    head = list(messages[:lead])
    for i, (content, new) in enumerate(zip(contents, regroup(arranged.texts, [len(t) for t in texts]))):
        edited = with_texts(content, new)
        if edited is not content:
            head[i] = {**(codec.as_mapping(head[i]) or {}), "content": edited}
    stable, volatile = split_cache(arranged.tail)
    tail = codec.tail_message([*stable, *volatile]) if arranged.tail else []
    return [
        *head,
        *codec.system_message(arranged.stable),
        *([codec.write_message(m) for m in plan.history] if history else []),
        *codec.system_message(arranged.volatile),
        *messages[lead:],
        *tail,
    ]
