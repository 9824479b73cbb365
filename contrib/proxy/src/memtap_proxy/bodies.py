"""Parsing request bodies, reusing the parsed members an agent sends again on every request.

An agent's request is its conversation followed by what does not change from one turn to the
next: Claude Code sends ``messages`` then ``system``, ``tools`` (32 KB of schemas),
``metadata`` and settings; Codex sends ``input`` then ``tools`` and its metadata. Parsing
those members again costs most of a request's parse (0.3 ms of 0.35 for Claude Code's 50 KB:
decoding text with an emoji in it to a 4-byte-per-character string, then the schemas'
thousands of small objects), so :class:`BodyParser` keeps them, parsed, and on a body that
holds the same bytes parses only the rest.

What is kept of a body is a *segment* ``S``: its members from the one after the conversation
to the last large one (``system`` and ``tools``), cut at top-level member boundaries; the
small members after it, the *rest* ``R`` (Claude Code's ``metadata`` names the session,
Codex's ``prompt_cache_key`` and ``client_metadata`` too), are parsed with every body, so a
new session of an agent reuses what its earlier sessions kept. A segment is keyed by the
bytes before its end, and found where the rest starts: at the closing brace when it is the
body's last member, else where the rest's first member name (as that body wrote it, comma
included: the *marker*) occurs last in the body's end.

Why this is exact: a kept ``S`` is ``,"key":value...`` cut at top-level member boundaries of
an earlier body (checked when it is kept: its own parse has exactly that body's members,
equal values; it ends with a comma-delimited or a self-delimiting value). A new body
``B = H + S + R`` is split there only when ``H + "}"`` parses as a non-empty JSON object
and ``R`` (empty: ``}``) as the members of one. ``H`` then cannot end inside a string (the
added ``}`` would leave it unterminated) nor inside a nested value (the braces would not
balance), so ``S`` starts between two top-level members of ``B``, is read there exactly as
on its own, and ``R`` follows it at the top level. ``B`` parses to ``H``'s members updated
with ``S``'s, then ``R``'s (a key in two of them keeps the first one's place and the last
one's value, as in ``json.loads``). Anything else is parsed whole. The parsed segment's
values are shared by every body that reuses them: callers must not change a parsed body in
place (memtap never does: injection builds new lists and dicts).
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Iterator
from typing import Any

import attrs

#: The members a conversation is in, per wire format: the kept segment starts after it.
CONVERSATION_KEYS = ("messages", "input", "contents")
#: A segment shorter than this is parsed again (keeping it would save less than it costs);
#: the segment ends with the last member after the conversation at least this long.
MIN_TAIL = 2048
#: Bytes before a segment's end that key the kept segments.
KEY_BYTES = 512
#: The rest after a kept segment is looked for in this many bytes at a body's end.
MAX_REST = 4096
#: Places where the segment may start that are tried before a body is left unkept (each try
#: parses the segment: the member's name after a comma, also nested, costs one more).
MAX_CANDIDATES = 4
#: Kept segments that end with the same bytes (the newest are kept).
MAX_PER_KEY = 4
_SPACE = b" \t\r\n"


def parse_json(body: bytes) -> Any:
    """A JSON body, parsed (``None`` when it is not JSON)."""
    try:
        return json.loads(body)
    except ValueError:
        return None


@attrs.frozen
class _Kept:
    """A kept segment: its bytes, its parsed members, and the marker of the rest after it
    (``None``: the segment ends at the body's closing brace)."""

    segment: bytes
    members: dict[str, Any]
    marker: bytes | None


class BodyParser:
    """Parses JSON request bodies (``None`` when a body is not JSON), reusing the parsed
    segments of recent bodies (up to ``max_tails`` of them, up to :data:`MAX_PER_KEY` that
    end with the same bytes). Not thread-safe: one per event loop."""

    def __init__(self, max_tails: int = 32) -> None:
        self.max_tails = max_tails
        #: The bytes before a segment's end -> the kept segments ending with them, newest
        #: first (agents sending the same tools after different system prompts).
        self._tails: OrderedDict[bytes, list[_Kept]] = OrderedDict()
        #: How many segments are kept in all (at most ``max_tails``).
        self._kept = 0
        #: The markers of the kept segments' rests, and how many segments have each.
        self._markers: Counter[bytes] = Counter()
        #: Bodies parsed whole / with a kept segment (for tests and ``mem:status``).
        self.whole = 0
        self.reused = 0

    def parse(self, body: bytes) -> Any:
        """``body`` parsed, as :func:`json.loads` would (``None`` when it is not JSON)."""
        if len(body) > MIN_TAIL:
            for end in self._ends(body):
                key = body[end - KEY_BYTES : end]
                for kept in self._tails.get(key, ()):
                    if not body.startswith(kept.segment, end - len(kept.segment)):
                        continue
                    parsed = _with_segment(body, end, kept)
                    if parsed is not None:
                        self._tails.move_to_end(key)
                        self.reused += 1
                        return parsed
        self.whole += 1
        parsed = parse_json(body)
        if isinstance(parsed, dict) and len(body) > MIN_TAIL:
            self._keep(body, parsed)
        return parsed

    def _ends(self, body: bytes) -> Iterator[int]:
        """Where a kept segment may end in ``body``: before its closing brace, and before
        the last occurrence of each kept marker near its end."""
        end = len(body)
        while end and body[end - 1] in _SPACE:
            end -= 1
        if end and body[end - 1] == 0x7D:  # }
            yield end - 1
        start = max(0, len(body) - MAX_REST)
        for marker in self._markers:
            found = body.rfind(marker, start)
            if found > 0:
                yield found

    def _keep(self, body: bytes, parsed: dict[str, Any]) -> None:
        """Find where the members after the conversation start in ``body``, and where the
        last large one ends, and keep them (parsed) when they parse to exactly ``parsed``'s
        members, and the rest after them to its last ones."""
        keys = list(parsed)
        start = next((i + 1 for i, k in enumerate(keys) if k in CONVERSATION_KEYS), None)
        if start is None or start >= len(keys):
            return
        later = _member_starts(body, keys[start + 1 :], len(body))
        if later is None:
            return
        first = json.dumps(keys[start]).encode()
        # From the end: the member comes after any nested key of the same name before it.
        for comma in _commas_before(body, first, later[0] if later else len(body)):
            if self._keep_at(body, parsed, keys[start:], [comma, *later]):
                return

    def _keep_at(self, body: bytes, parsed: dict[str, Any], keys: list[str], bounds: list[int]) -> bool:
        """Keep the segment of ``body`` whose members ``keys`` start at ``bounds`` (their
        commas), if it checks out."""
        # Each member's bytes run to the next one's comma (the last one's: to the end).
        sizes = [b - a for a, b in zip(bounds, [*bounds[1:], len(body)], strict=True)]
        last = max((i for i, size in enumerate(sizes) if size >= MIN_TAIL), default=None)
        if last is None:
            return False
        if last + 1 < len(bounds):
            seg_end = bounds[last + 1]
        else:  # the segment runs to the closing brace
            seg_end = len(body)
            while seg_end and body[seg_end - 1] in _SPACE:
                seg_end -= 1
            seg_end -= 1
        segment = body[bounds[0] : seg_end]
        if len(segment) < MIN_TAIL or seg_end < KEY_BYTES:
            return False
        kept_keys, rest_keys = keys[: last + 1], keys[last + 1 :]
        members = _members(segment + b"}")
        if members is None or list(members) != kept_keys or any(members[k] != parsed[k] for k in kept_keys):
            return False
        marker = None
        if rest_keys:
            rest = _members(body[seg_end:])
            if rest is None or list(rest) != rest_keys or any(rest[k] != parsed[k] for k in rest_keys):
                return False
            quote = body.index(b'"', seg_end)
            marker = body[seg_end : quote + len(json.dumps(rest_keys[0]).encode())]
            if len(body) - seg_end > MAX_REST or body.rfind(marker) != seg_end:
                return False  # the rest would not be found again where it starts
        key = body[seg_end - KEY_BYTES : seg_end]
        bucket = self._tails.pop(key, [])
        same = [k for k in bucket if k.segment == segment and k.marker == marker]
        bucket = [_Kept(segment, members, marker), *(k for k in bucket if k not in same)]
        for dropped in [*same, *bucket[MAX_PER_KEY:]]:
            self._forget(dropped)
        self._tails[key] = bucket[:MAX_PER_KEY]
        if marker is not None:
            self._markers[marker] += 1
        self._kept += 1 - len(same) - len(bucket[MAX_PER_KEY:])
        while self._kept > self.max_tails:  # the oldest segment of the least recent key goes
            oldest_key = next(iter(self._tails))
            oldest = self._tails[oldest_key]
            self._forget(oldest.pop())
            self._kept -= 1
            if not oldest:
                del self._tails[oldest_key]
        return True

    def _forget(self, kept: _Kept) -> None:
        """A kept segment is dropped: its marker is looked for as long as others have it."""
        if kept.marker is not None:
            self._markers[kept.marker] -= 1
            if self._markers[kept.marker] <= 0:
                del self._markers[kept.marker]


def _with_segment(body: bytes, end: int, kept: _Kept) -> dict[str, Any] | None:
    """``body`` parsed around ``kept``'s segment, which ends at ``end`` (``None``: the cut is
    not between top-level members, or the body is not JSON)."""
    if kept.marker is None:  # the segment was the body's last member: so must it be here
        if body[end : end + 1] != b"}" or body[end + 1 :].strip(_SPACE):
            return None
    elif not body.startswith(kept.marker, end):
        return None
    start = end - len(kept.segment)
    try:
        head = json.loads(body[:start] + b"}")
    except ValueError:
        return None
    if not isinstance(head, dict) or not head:
        return None
    rest: dict[str, Any] | None = None
    if kept.marker is not None:
        rest = _members(body[end:])
        if not rest:
            return None
    head.update(kept.members)
    if rest:
        head.update(rest)
    return head


def _members(part: bytes) -> dict[str, Any] | None:
    """The members of ``part``, ``,"key":value...}`` (``None``: it is not that)."""
    try:
        members = json.loads(b"{" + part[1:])
    except ValueError:
        return None
    return members if isinstance(members, dict) else None


def _commas_before(body: bytes, name: bytes, limit: int) -> Iterator[int]:
    """The commas before the last :data:`MAX_CANDIDATES` occurrences of the member name
    ``name`` (JSON-quoted) in ``body`` before ``limit`` that follow one (across spaces)."""
    found = body.rfind(name, 0, limit)
    tries = MAX_CANDIDATES
    while found > 0 and tries:
        comma = found
        while comma > 0 and body[comma - 1] in _SPACE:
            comma -= 1
        if body[comma - 1 : comma] == b",":
            tries -= 1
            yield comma - 1
        found = body.rfind(name, 0, found)


def _member_starts(body: bytes, keys: list[str], limit: int) -> list[int] | None:
    """Where each of the last top-level members ``keys`` of ``body`` (before ``limit``)
    starts, at its comma: the last occurrence of its name after a comma, found from the
    end; ``None`` when one is not found. A name found nested in a later member is caught
    by the caller's parse of what it cut."""
    starts: list[int] = []
    for key in reversed(keys):
        comma = next(_commas_before(body, json.dumps(key).encode(), limit), None)
        if comma is None:
            return None
        starts.append(comma)
        limit = comma
    starts.reverse()
    return starts
