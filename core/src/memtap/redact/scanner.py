"""The scanner: every detector and assignment rule compiled into one pattern per pivot
character, run once over a text; the spans it finds, and the text with them replaced.

**How it stays fast.** Python's regex engine searches fastest for a pattern that starts
with one literal character (a ``memchr``-like loop, ~0.6 µs/KB here), and is slow for an
alternation or a character class at the start (5-50x slower). So every detector names a
*pivot*: one character every match of it contains at a fixed offset (``-`` in ``sk-``,
``_`` in ``ghp_``, ``.`` in ``SG.``, ``J`` in ``eyJ``, ``=``/``:`` of ``password=``...).
There is one compiled pattern per pivot: the pivot, then *gates*, cheap lookarounds tried
right after it (for most detectors merged: what precedes the pivot, as lookbehinds
grouped by width, and a minimum run of key characters after it). A pivot in ordinary text
("task-notification", "risk-first", ``"type":``) fails a gate inside the regex engine in
a few nanoseconds; Python decides only the candidates a gate lets through, with the full
formats of that gate's detectors.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from memtap.redact.assignments import (
    _CLI_GATE,
    _HAR_GATE,
    _assignment,
    _assignment_gate,
    _cli_flag,
    _har_value,
)
from memtap.redact.detectors import DETECTORS, MIN_SECRET_CHARS, Detector, _starts_word
from memtap.redact.validators import _aws_secret

#: What a secret is replaced with in text.
REDACTED = "[REDACTED]"


Handler = Callable[[str, int], "tuple[int, int] | None"]

#: What must follow a pivot for the merged lookbehind gate of its detectors to be worth
#: testing (the shortest value of any of them).
PIVOT_AHEAD = {
    "-": r"[A-Za-z0-9_-]{16}",
    "_": r"[A-Za-z0-9_+/=-]{20}",
    ".": r"[A-Za-z0-9_-]{20}",
}


@dataclass(frozen=True)
class _Rule:
    """A compiled detector (``verify`` matched at the pivot) or an assignment handler."""

    name: str
    verify: re.Pattern[str] | None
    detector: Detector | None = None
    handler: Handler | None = None
    extend: re.Pattern[str] | None = None
    #: ``before`` when it is plain text: tested with ``str.startswith`` before ``verify``.
    literal: str | None = None


def _before_width(d: Detector) -> int:
    """The width of ``d.before`` (fixed, as lookbehinds require): the ``n`` for which
    ``(?<=before|.{n})`` compiles (Python accepts alternatives of one width only)."""
    for n in range(1, 65):
        try:
            re.compile(f"(?<=(?:{d.before})|[\\s\\S]{{{n}}})")
        except re.error:
            continue
        return n
    raise ValueError(f"detector {d.name!r}: 'before' must have a fixed width")


def _merged_lookbehinds(detectors: Iterable[Detector]) -> str:
    """``(?<=aa-|bb-)|(?<=ccc-)``: one lookbehind per width of the detectors' ``before``."""
    by_width: dict[int, list[str]] = {}
    for d in detectors:
        by_width.setdefault(_before_width(d), []).append(f"(?:{d.before}){re.escape(d.pivot)}")
    return "|".join(f"(?<={'|'.join(alts)})" for _, alts in sorted(by_width.items()))


class _Scanner:
    """The compiled detectors: one candidate pattern per pivot character, and the rules
    that decide on each candidate."""

    def __init__(self, detectors: Iterable[Detector]) -> None:
        # Per pivot, the gates in order, each with the rules it can let through (a gate is a
        # named group, so a candidate is decided by its own gate's rules only).
        gates: dict[str, list[tuple[str, list[_Rule]]]] = {}
        merged: dict[str, list[tuple[Detector, _Rule]]] = {}
        for d in detectors:
            pivot = re.escape(d.pivot)
            lookbehind = f"(?<=(?P<b>{d.before}))" if d.before else ""
            verify = f"{lookbehind}{pivot}(?:{d.after})"
            if d.secret:
                verify = verify.replace(f"(?P<{d.secret}>", "(?P<s>")
            extend = re.compile(f"[{d.extend}]{{0,8}}\\Z") if d.extend else None
            literal = d.before if d.before and re.escape(d.before) == d.before else None
            rule = _Rule(d.name, re.compile(verify), d, extend=extend, literal=literal)
            if d.gate is None and d.before:
                merged.setdefault(d.pivot, []).append((d, rule))
            else:
                gates.setdefault(d.pivot, []).append((d.gate or f"(?={d.after})", [rule]))
        for pivot, group in merged.items():
            gate = f"(?={PIVOT_AHEAD[pivot]})(?:{_merged_lookbehinds(d for d, _ in group)})"
            gates.setdefault(pivot, []).insert(0, (gate, [rule for _, rule in group]))
        for pivot in ("=", ":"):
            gates.setdefault(pivot, []).append(
                (_assignment_gate(pivot), [_Rule("assignment", None, handler=_assignment)])
            )
        # After the assignment gate: JSON nested twice or more (``\\\\"value\\\\":``) passes
        # that one, whose handler sends ``value`` keys to :func:`_har_value`.
        gates[":"].append((_HAR_GATE, [_Rule("har-cookie", None, handler=_har_value)]))
        gates["-"].append((_CLI_GATE, [_Rule("cli-flag", None, handler=_cli_flag)]))
        self.rules: dict[str, list[_Rule]] = {}
        self.patterns: list[tuple[str, re.Pattern[str]]] = []
        for pivot, alternatives in gates.items():
            names = []
            for gate, rules in alternatives:
                name = f"g{len(self.rules)}"
                self.rules[name] = rules
                names.append(f"(?P<{name}>{gate})")
            self.patterns.append((pivot, re.compile(re.escape(pivot) + "(?:" + "|".join(names) + ")")))

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, detector)`` of every secret in ``text``, in no particular order."""
        found: list[tuple[int, int, str]] = []
        for pivot, pattern in self.patterns:
            if pivot not in text:
                continue
            covered = -1
            for m in pattern.finditer(text):
                at = m.start()
                if at < covered:
                    continue  # inside a secret this pivot found already
                for rule in self.rules[m.lastgroup or ""]:
                    span = self._decide(rule, text, at)
                    if span is not None:
                        found.append(span)
                        covered = span[1]
                        break
        for start, end, name in list(found):
            if name == "aws-access-key-id":
                found.extend(_aws_secret_near(text, start, end))
        return found

    @staticmethod
    def _decide(rule: _Rule, text: str, at: int) -> tuple[int, int, str] | None:
        """The secret ``rule`` finds with its pivot at ``at``, if any."""
        if rule.handler is not None:
            value = rule.handler(text, at)
            return None if value is None else (value[0], value[1], rule.name)
        assert rule.verify is not None and rule.detector is not None
        if rule.literal is not None and not text.startswith(rule.literal, at - len(rule.literal)):
            return None
        m = rule.verify.match(text, at)
        if m is None:
            return None
        d = rule.detector
        if d.secret:
            start, end = m.start("s"), m.end("s")
            if d.check is not None and not d.check(text[start:end]):
                return None
            return start, end, d.name
        end = m.end()
        for start in _starts(rule, text, m.start("b") if d.before else at):
            if d.boundary and not _starts_word(text, start):
                continue
            if d.check is None or d.check(text[start:end]):
                return start, end, d.name
        return None


def _starts(rule: _Rule, text: str, start: int) -> list[int]:
    """Where a match may start: at ``start``, or (nearest first) further left over the
    rule's ``extend`` characters."""
    if rule.extend is None:
        return [start]
    ext = rule.extend.search(text, max(0, start - 8), start)
    return list(range(start, (ext.start() if ext else start) - 1, -1))


_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40}(?![A-Za-z0-9+/=])")


def _aws_secret_near(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """An AWS secret access key (40 base64 characters, no prefix) written near its key id."""
    out = []
    for m in _AWS_SECRET.finditer(text, max(0, start - 300), min(len(text), end + 300)):
        if _aws_secret(m.group()):
            out.append((m.start(), m.end(), "aws-secret-access-key"))
    return out


_SCANNER = _Scanner(DETECTORS)


def _merge(spans: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end, _ in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _escape_safe(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink a span so that it neither takes the backslash of an escape whose character
    follows it nor starts with a character a backslash escapes (redacted JSON text stays
    valid JSON)."""
    run = 0
    while end - run > start and text[end - run - 1] == "\\":
        run += 1
    if run % 2:
        end -= 1
    run = 0
    while start - run > 0 and text[start - run - 1] == "\\":
        run += 1
    if run % 2:
        start += 1
    return start, end


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Every secret in ``text`` as ``(start, end, detector name)``, sorted by position
    (overlapping findings of several detectors are all listed)."""
    if len(text) < MIN_SECRET_CHARS:
        return []
    return sorted(_SCANNER.spans(text))


def _apply(text: str, spans: list[tuple[int, int, str]]) -> str:
    out = []
    last = 0
    for start, end in _merge(spans):
        start, end = _escape_safe(text, start, end)
        if end <= start or start < last:
            continue
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)
