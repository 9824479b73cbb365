"""Reading message content the way most wire formats carry it: a string or a list of parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
