"""Parsing request bodies, reusing the parsed tail an agent sends again on every turn.

An agent's request is its conversation followed by what does not change from one turn to the
next: Claude Code sends ``messages`` then ``system``, ``tools`` (32 KB of schemas),
``metadata`` and settings; Codex sends ``input`` then ``tools`` and its metadata. Parsing
that tail again costs most of a request's parse (0.3 ms of 0.35 for Claude Code's 50 KB:
decoding text with an emoji in it to a 4-byte-per-character string, then the schemas'
thousands of small objects), so :class:`BodyParser` keeps the parsed tail of bodies it has
seen, keyed by their last bytes, and on a body that ends with the same bytes parses only
the part before it.

Why this is exact: a kept tail ``T`` is ``,"key":value...}`` cut at a top-level member
boundary of an earlier body (checked when it is kept: its own parse has exactly that body's
last members, equal values). A new body ``B = H + T`` is split there only when ``H + "}"``
parses as a non-empty JSON object. ``H`` then cannot end inside a string (the added ``}``
would leave it unterminated) nor inside a nested value (the braces would not balance), so
the cut is between two top-level members of ``B``, and ``B`` parses to ``H``'s members
updated with ``T``'s (a key in both keeps ``T``'s value: JSON's last one wins, as in
``json.loads``). Anything else is parsed whole. The parsed tail's values are shared by every
body that reuses them: callers must not change a parsed body in place (memtap never does:
injection builds new lists and dicts).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

#: The members a conversation is in, per wire format: the tail starts after it.
CONVERSATION_KEYS = ("messages", "input", "contents")
#: A tail shorter than this is parsed again (keeping it would save less than it costs).
MIN_TAIL = 2048
#: Bytes at the end of a body that key the kept tails.
KEY_BYTES = 512
#: Places where the tail may start that are tried before a body is left unkept (each try
#: parses the tail: the member's name after a comma, also nested, costs one more).
MAX_CANDIDATES = 4


def parse_json(body: bytes) -> Any:
    """A JSON body, parsed (``None`` when it is not JSON)."""
    try:
        return json.loads(body)
    except ValueError:
        return None


class BodyParser:
    """Parses JSON request bodies (``None`` when a body is not JSON), reusing the parsed
    tail of up to ``max_tails`` recent bodies. Not thread-safe: one per event loop."""

    def __init__(self, max_tails: int = 32) -> None:
        self.max_tails = max_tails
        #: Last bytes of a body -> (its tail's bytes, the tail's parsed members).
        self._tails: OrderedDict[bytes, tuple[bytes, dict[str, Any]]] = OrderedDict()
        #: Bodies parsed whole / with a kept tail (for tests and ``mem:status``).
        self.whole = 0
        self.reused = 0

    def parse(self, body: bytes) -> Any:
        """``body`` parsed, as :func:`json.loads` would (``None`` when it is not JSON)."""
        if len(body) > MIN_TAIL:
            key = body[-KEY_BYTES:]
            kept = self._tails.get(key)
            if kept is not None and body.endswith(kept[0]):
                parsed = self._with_tail(body, *kept)
                if parsed is not None:
                    self._tails.move_to_end(key)
                    self.reused += 1
                    return parsed
        self.whole += 1
        parsed = parse_json(body)
        if isinstance(parsed, dict) and len(body) > MIN_TAIL:
            self._keep_tail(body, parsed)
        return parsed

    @staticmethod
    def _with_tail(body: bytes, tail: bytes, members: dict[str, Any]) -> dict[str, Any] | None:
        try:
            head = json.loads(body[: len(body) - len(tail)] + b"}")
        except ValueError:
            return None
        if not isinstance(head, dict) or not head:
            return None
        head.update(members)
        return head

    def _keep_tail(self, body: bytes, parsed: dict[str, Any]) -> None:
        """Find where the members after the conversation start in ``body`` and keep them
        (parsed) when they are long enough and parse to exactly ``parsed``'s last members."""
        keys = list(parsed)
        start = next((i + 1 for i, k in enumerate(keys) if k in CONVERSATION_KEYS), None)
        if start is None or start >= len(keys):
            return
        first = json.dumps(keys[start]).encode()
        tries = MAX_CANDIDATES
        cut = body.rfind(first)  # from the end: the member comes after any nested key before it
        while cut > 0 and tries:
            comma = cut
            while comma > 0 and body[comma - 1] in b" \t\r\n":
                comma -= 1
            tail = body[comma - 1 :]
            if body[comma - 1 : comma] == b"," and len(tail) >= MIN_TAIL:
                tries -= 1
                if self._is_tail(tail, keys[start:], parsed):
                    self._tails[body[-KEY_BYTES:]] = (tail, _members(tail))
                    if len(self._tails) > self.max_tails:
                        self._tails.popitem(last=False)
                    return
            cut = body.rfind(first, 0, cut)

    @staticmethod
    def _is_tail(tail: bytes, keys: list[str], parsed: dict[str, Any]) -> bool:
        try:
            members = _members(tail)
        except ValueError:
            return False
        return list(members) == keys and all(members[k] == parsed[k] for k in keys)


def _members(tail: bytes) -> dict[str, Any]:
    """The members of a tail ``,"key":value...}``."""
    members = json.loads(b"{" + tail[1:])
    if not isinstance(members, dict):
        raise ValueError("not an object's members")
    return members
