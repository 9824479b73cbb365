"""An edited body as text: the client's own text, with only what memtap changed written anew.

A wire protocol's ``inject`` returns a new body that shares every value it did not change
with the client's parsed body (the very objects: ``new[k] is old[k]``), copies only the
containers on the way to a change, and only ever adds (history, memory blocks) or
replaces (a message with a block appended, a system text with a block inside): it never
removes or reorders what the client sent. :func:`splice` walks the two bodies along those
copies and writes, into the client's text, just the new and replaced values (of a string
that only gained text, such as an agent's system prompt with a memory block anchored
inside, just that text); everything else keeps the client's bytes, escapes, number
spellings and whitespace included. Finding
where a value ends in the text uses the standard library's C scanner (``json.scanner``),
so the cost is a parse of what lies before the last change, not a serialisation of the
whole body (a 50 KB Claude Code request serialises in ~0.6 ms). The scanner reads the
body's bytes as Latin-1, one character per byte: JSON's structure is ASCII and UTF-8 never
uses an ASCII byte inside a character, so every position found is a byte offset, and the
result is made of byte slices of the client's body without decoding or encoding it.

Whatever :func:`splice` cannot do exactly (a key removed or reordered, duplicate keys in
the client's text, an element dropped) it declines (``None``); the caller then serialises
the whole body as before. New text is written by :func:`json.dumps` (compact, UTF-8), so
it is escaped correctly by construction.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
from collections.abc import Callable, Mapping
from typing import Any, cast

__all__ = ["dumps", "splice"]

# The standard library's C scanner (typeshed knows neither signature).
_scan: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_WS = " \t\n\r"


class _Declined(Exception):
    """The change cannot be written as a splice."""


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (keys in order, UTF-8 characters as they are)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _elements(values: list[Any]) -> str:
    """Array elements as JSON text, comma-separated (one encoder call for them all)."""
    return dumps(values)[1:-1]


def _ws(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WS:
        at += 1
    return at


def _expect(text: str, at: int, char: str) -> int:
    at = _ws(text, at)
    if at >= len(text) or text[at] != char:
        raise _Declined(f"expected {char!r} at {at}")
    return _ws(text, at + 1)


def _end(text: str, at: int) -> int:
    """Where the value starting at ``at`` ends."""
    try:
        return int(_scan(text, at)[1])
    except StopIteration as exc:
        raise _Declined(f"no value at {at}") from exc


def _latin1(text: str) -> str:
    """``text`` as JSON string content (no quotes), in the Latin-1 view of its UTF-8."""
    return dumps(text)[1:-1].encode().decode("latin-1")


def _insertion(old: str, new: str) -> int | None:
    """Where ``new`` is ``old`` with text inserted (``new[at:at + len(new) - len(old)]``),
    or ``None`` when it is not."""
    extra = len(new) - len(old)
    if extra <= 0:
        return None
    if new.startswith(old):
        return len(old)
    # The longest common prefix, by halving (slices compare in C: no loop per character).
    low, high = 0, len(old)
    while low < high:
        mid = (low + high + 1) // 2
        if new[:mid] == old[:mid]:
            low = mid
        else:
            high = mid - 1
    return low if new[low + extra :] == old[low:] else None


def _escapes_open(text: str, at: int) -> int:
    """How many backslashes end ``text[:at]`` (odd: the next character is escaped)."""
    run = 0
    while at - run > 0 and text[at - run - 1] == "\\":
        run += 1
    return run


def _between_escapes(text: str, at: int) -> bool:
    """Whether ``at`` in a JSON string's text is not inside an escape (``\\n``, ``\\u00e9``)."""
    if _escapes_open(text, at) % 2:
        return False
    for back in range(2, 6):  # a "\\u" opened 2 to 5 characters before, and not closed
        start = at - back
        if start >= 0 and text[start : start + 2] == "\\u" and _escapes_open(text, start) % 2 == 0:
            return False
    return True


def _utf8(latin1: str) -> str:
    """A string read from the Latin-1 view of UTF-8 bytes, as the text it is."""
    try:
        return latin1.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return latin1


def _similar(old: Any, new: Any) -> bool:
    """Whether ``new`` looks like a copy of ``old`` (the same kind of message or part)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return (
            old.get("role") == new.get("role")
            and old.get("type") == new.get("type")
            and list(new)[: len(old)] == list(old)
        )
    return type(old) is type(new)


def _pair(old: list[Any], new: list[Any]) -> list[tuple[int, bool]] | None:
    """For each old element, its index in ``new`` and whether it is kept as the very
    object (else ``new[index]`` replaces it); ``None`` when one was removed. Every new
    element left over is an insertion. The pairing only decides how much is rewritten:
    any pairing in order writes exactly ``new``."""
    where = {id(v): i for i, v in enumerate(new)}
    kept = [where.get(id(v), -1) for v in old]
    plan: list[tuple[int, bool]] = []
    i = 0
    for j, element in enumerate(old):
        found = kept[j]
        if found >= i:
            plan.append((found, True))
            i = found + 1
            continue
        # Replaced: by a copy-like new element before the next kept old element's place.
        limit = next((k for k in kept[j + 1 :] if k >= i), len(new))
        if limit <= i:
            return None
        index = next((x for x in range(i, limit) if _similar(element, new[x])), limit - 1)
        plan.append((index, False))
        i = index + 1
    return plan


class _Splicer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.edits: list[tuple[int, int, str]] = []

    def value(self, at: int, old: Any, new: Any, *, need_end: bool) -> int:
        """Record the edits turning ``old`` (whose text starts at ``at``) into ``new``;
        return where ``old``'s text ends (``-1`` when not ``need_end`` and not known)."""
        if new is old:
            return _end(self.text, at) if need_end else -1
        done = len(self.edits)
        if isinstance(old, str) and isinstance(new, str) and self.text[at] == '"':
            end = _end(self.text, at)
            insert = self.string_insertion(at, end, old, new)
            if insert is None:
                self.edits.append((at, end, dumps(new)))
            else:
                self.edits.append(insert)
            return end
        try:
            if isinstance(old, Mapping) and isinstance(new, Mapping) and self.text[at] == "{":
                return self.object(at, old, new, need_end=need_end)
            if isinstance(old, list) and isinstance(new, list) and self.text[at] == "[":
                return self.array(at, old, new, need_end=need_end)
        except _Declined:
            del self.edits[done:]  # not as a diff: the value is written whole instead
        end = _end(self.text, at)
        self.edits.append((at, end, dumps(new)))
        return end

    def string_insertion(self, at: int, end: int, old: str, new: str) -> tuple[int, int, str] | None:
        """The edit writing only what ``new`` inserts into ``old`` (the string whose text
        runs from ``at`` to ``end``, quotes included), placed by the client's own text on
        the shorter side of the insertion (encoded as :func:`dumps` would: a client that
        spelled it otherwise gets the string written whole); ``None``: written whole."""
        cut = _insertion(old, new)
        if cut is None:
            return None
        text = self.text
        if len(old) - cut <= cut:
            after = _latin1(old[cut:])
            place = end - 1 - len(after)
            found = place > at and text[place : end - 1] == after and _between_escapes(text, place)
        else:  # (read from the string's start, the client's text is cut where an escape ends)
            before = _latin1(old[:cut])
            place = at + 1 + len(before)
            found = place < end and text[at + 1 : place] == before
        if not found:
            return None
        return (place, place, dumps(new[cut : cut + len(new) - len(old)])[1:-1])

    def object(
        self, at: int, old: Mapping[str, Any], new: Mapping[str, Any], *, need_end: bool, close: int = -1
    ) -> int:
        """An object whose members keep their order; new keys only after the old ones.
        ``close`` is where its ``}`` is, when known (the body's own: the text's end)."""
        keys = list(old)
        added = [k for k in new if k not in old]
        if len(new) != len(keys) + len(added) or list(new)[: len(keys)] != keys:
            raise _Declined("keys removed or reordered")
        changed = [i for i, k in enumerate(keys) if new[k] is not old[k]]
        if not changed and not added:
            return _end(self.text, at) if need_end else -1
        last = changed[-1] if changed else -1
        # Scanned to the closing brace: when the caller needs the end, or keys are added
        # and the brace is not known.
        must_finish = need_end or (bool(added) and close < 0)
        text = self.text
        pos = _ws(text, at + 1)
        if last >= 0 or must_finish:
            for i, key in enumerate(keys):
                if i:
                    pos = _expect(text, pos, ",")
                if pos >= len(text) or text[pos] != '"':
                    raise _Declined("member expected")
                name, pos = _scanstring(text, pos + 1)
                if name != key and (name.isascii() or _utf8(name) != key):
                    raise _Declined("duplicate or unexpected key")  # json.loads kept the last
                pos = _expect(text, pos, ":")
                if i == last and not must_finish:
                    self.value(pos, old[key], new[key], need_end=False)
                    break
                pos = self.value(pos, old[key], new[key], need_end=True)
        if added:
            if close < 0:
                close = _ws(text, pos)
            if close >= len(text) or text[close] != "}":
                raise _Declined("object not closed where expected")
            members = ",".join(f"{dumps(k)}:{dumps(new[k])}" for k in added)
            self.edits.append((close, close, ("," if keys else "") + members))
            return close + 1
        if not must_finish:
            return -1
        pos = _ws(text, pos)
        if pos >= len(text) or text[pos] != "}":
            raise _Declined("more members than parsed")
        return pos + 1

    def array(self, at: int, old: list[Any], new: list[Any], *, need_end: bool) -> int:
        """An array whose old elements stay in order: some kept (the very objects), some
        replaced (by a copy), new ones inserted anywhere; none removed."""
        plan = _pair(old, new)
        if plan is None:
            raise _Declined("element removed")
        # The last old element with work at it (an insertion before it, or a replacement).
        last = -1
        previous = -1
        for j, (index, kept) in enumerate(plan):
            if index != previous + 1 or not kept:
                last = j
            previous = index
        tail = new[previous + 1 :]
        finish = need_end or bool(tail)
        text = self.text
        pos = _ws(text, at + 1)
        previous = -1
        for j, (index, kept) in enumerate(plan):
            if j:
                pos = _expect(text, pos, ",")
            if index > previous + 1:
                self.edits.append((pos, pos, _elements(new[previous + 1 : index]) + ","))
            previous = index
            if j >= last and not finish:
                if not kept:
                    self.value(pos, old[j], new[index], need_end=False)
                return -1
            pos = _end(text, pos) if kept else self.value(pos, old[j], new[index], need_end=True)
        pos = _ws(text, pos)
        if pos >= len(text) or text[pos] != "]":
            raise _Declined("more elements than parsed")
        if tail:
            self.edits.append((pos, pos, ("," if old else "") + _elements(tail)))
        return pos + 1

    def result(self, raw: bytes) -> bytes:
        """``raw`` with the edits made (their positions are byte offsets into it)."""
        pieces: list[bytes] = []
        at = 0
        for start, end, replacement in self.edits:
            if start < at:
                raise _Declined("overlapping edits")
            pieces.append(raw[at:start])
            pieces.append(replacement.encode())
            at = end
        pieces.append(raw[at:])
        return b"".join(pieces)


def splice(raw: bytes, old: Mapping[str, Any], new: Mapping[str, Any]) -> bytes | None:
    """``new`` as JSON, made from the client's UTF-8 body ``raw`` (which parses to ``old``)
    by writing only what ``new`` does not share with ``old``; ``None`` when that cannot be
    done exactly (then serialise ``new`` whole)."""
    text = raw.decode("latin-1")  # one character per byte: positions are byte offsets
    start = _ws(text, 0)
    close = len(text.rstrip(_WS)) - 1
    if start >= len(text) or text[start] != "{" or close < start or text[close] != "}":
        return None
    splicer = _Splicer(text)
    try:
        splicer.object(start, old, new, need_end=False, close=close)
        return splicer.result(raw)
    except (_Declined, ValueError, IndexError):
        return None
