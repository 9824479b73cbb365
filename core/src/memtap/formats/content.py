"""Reading message content the way most wire formats carry it: a string or a list of parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from memtap.protocol.model import Message, Role

#: Part types whose ``text`` is conversation text.
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def content_text(content: Any) -> str:
    """The text of a message's content: a string as is; for a list of parts, the text
    parts joined by newlines and a ``[type]`` marker for every other part (image, audio,
    file...), so what was sent is visible in history without storing the payload."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    pieces: list[str] = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, Mapping):
            kind = part.get("type")
            if kind in TEXT_PART_TYPES or (kind is None and "text" in part):
                pieces.append(str(part.get("text", "")))
            elif kind == "refusal":
                pieces.append(str(part.get("refusal", "")))
            else:
                pieces.append(f"[{kind or 'part'}]")
    return "\n".join(pieces)


#: The roles a message may have.
ROLES: tuple[str, ...] = get_args(Role)


def given_messages(value: Any, default_role: Role, what: str) -> tuple[Message, ...]:
    """``value`` as messages: a list of :class:`Message` or of ``{"role", "content"}`` dicts
    (the shape every chat API uses; a content given as text parts is joined), or one text
    (a ``default_role`` message). Anything else raises :class:`TypeError` naming ``what``
    and the accepted forms."""
    if isinstance(value, str):
        return (Message(role=default_role, content=value),)
    if isinstance(value, (Message, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{what} takes a list of messages, got {type(value).__name__}{_ACCEPTED}")
    return tuple(_as_message(m, what) for m in value)


_ACCEPTED = ": give memtap.Message objects, dicts such as {'role': 'user', 'content': 'hi'}, or one text"


def _as_message(m: Any, what: str) -> Message:
    if isinstance(m, Message):
        return m
    if not isinstance(m, Mapping):
        raise TypeError(f"{what} got a {type(m).__name__} where a message was expected{_ACCEPTED}")
    try:
        role, text = role_and_text(m)
    except ValueError as exc:
        raise TypeError(f"{what} got a message whose {exc}") from None
    return Message(role=role, content=text, name=m.get("name"), tool_call_id=m.get("tool_call_id"))


def role_and_text(record: Mapping[str, Any]) -> tuple[Role, str]:
    """A message dict's role and text (:func:`content_text`); raises :class:`ValueError`
    saying what is wrong with either (read by ``Memory.capture`` and the transcript import)."""
    role = record.get("role")
    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    content = record.get("content")
    if content is not None and not isinstance(content, str | list | Mapping):
        raise ValueError(f"content must be a string or a list of parts, not {type(content).__name__}")
    return role, content_text(content)
