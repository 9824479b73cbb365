"""Time in recall: the time a question asks about, and the time a fact speaks of, as windows.

A question such as "what did I eat yesterday?" or "which city did I visit in May 2023?"
names a time; :func:`query_window` finds the first such expression and turns it into a
half-open window ``[start, end)`` relative to the question's ``now``. A fact such as "I
went to the support group yesterday", said on 8 May 2023, speaks of 7 May:
:func:`mentioned_window` finds that, relative to when the fact was said. Recall
(:mod:`memtap.longterm.index`) ranks the facts said or speaking of a time within the question's
window first, and the injected block shows each fact's date with what its relative words
meant (:func:`resolved_note`).

The expressions understood (English, case-insensitive):

- days: ``today``, ``this morning`` / ``afternoon`` / ``evening``, ``tonight``,
  ``yesterday``, ``last night``, ``the day before yesterday``, ``tomorrow``, ``N days ago``
  (``N``: digits, ``a``/``one`` to ``twelve``; ``a few`` = 2-4, ``a couple of`` = 2),
  ``on`` / ``last`` / ``this past`` / ``next`` + a weekday (the latest such day before
  today; ``next``: the first after it), an ISO date (``2023-05-08``), ``8 May 2023``,
  ``8th of May``, ``May 8``, ``May 8th, 2023``;
- weeks (Monday to Sunday): ``this week``, ``last week``, ``next week``, ``N weeks ago``;
  weekends: ``this weekend``, ``last weekend``;
- months: ``this month``, ``last month``, ``next month``, ``N months ago``, a month name after
  ``in`` / ``during`` / ``of`` / ``since`` / ``last`` / ``this`` / ``early`` / ``mid`` / ``late``
  or followed by a year (``in May``, ``May 2023``, ``last May``);
- years: ``this year``, ``last year``, ``next year``, ``N years ago``, ``in 2022``
  (``in`` / ``during`` / ``of`` / ``since`` + a year from 1900 to 2099).

``since X`` runs from X to ``now``. A day, month or date without a year is the latest one
that has begun by ``now`` (for a question: people ask memory about the past); in a fact,
only unambiguous mentions count (relative words and dates with a year: "the wedding is in
May" may be either May). Days begin at midnight in ``now``'s time zone (UTC for memtap's
stored times). Not understood, on purpose: seasons (they depend on the hemisphere), vague
words ("recently", "lately"), ranges between two dates, and words on their own that are
also ordinary words ("may", "march", a bare weekday).

Only the first :data:`SCAN_CHARS` characters of a text are read. Written by hand, not with a
date-parsing library: this runs on every call's request path (a few microseconds for a
question with no time word or number, a few tens with one), where
``dateparser.search_dates`` takes milliseconds per text and a tenth of a second to import,
and none is among memtap's dependencies.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections import defaultdict
from collections.abc import Iterator
from functools import lru_cache

import attrs

__all__ = ["TimeWindow", "mentioned_window", "query_window", "resolved_note"]

_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_MONTH_ABBR = {m[:3]: i + 1 for i, m in enumerate(_MONTHS)}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_COUNT_WORDS = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]
_NUMBERS = {w: i + 1 for i, w in enumerate(_COUNT_WORDS)} | {
    "a": 1,
    "an": 1,
    "a couple of": 2,
    "couple of": 2,
}

#: A month's name or its abbreviation ("sep", "sept"), as a named group.
_MONTH = (
    r"(?P<{name}>"
    + "|".join(f"{m[:3]}(?:{m[3:]})?" if len(m) > 3 else m for m in _MONTHS).replace(
        "sep(?:tember)?", "sep(?:t(?:ember)?)?"
    )
    + ")"
)
_COUNT = r"(?P<n>\d{1,3}|a few|a couple of|couple of|an?|" + "|".join(_COUNT_WORDS) + ")"
_DAY = r"(?P<{name}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{name}>(?:19|20)\d\d)"

_PATTERNS: list[tuple[str, str]] = [
    ("iso", r"(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)"),
    (
        "day_month",
        r"(?:on\s+(?:the\s+)?)?"
        + _DAY.format(name="d")
        + r"\s+(?:of\s+)?"
        + _MONTH.format(name="m")
        + r"(?:,?\s+"
        + _YEAR.format(name="y")
        + ")?",
    ),
    (
        "month_day",
        r"(?:(?:on|in)\s+)?"
        + _MONTH.format(name="m")
        + r"\s+"
        + _DAY.format(name="d")
        + r"(?!\d)(?:,?\s+"
        + _YEAR.format(name="y")
        + ")?",
    ),
    ("day_before_yesterday", r"the\s+day\s+before\s+yesterday"),
    ("today", r"today|tonight|this\s+(?:morning|afternoon|evening)|earlier\s+today"),
    ("yesterday", r"yesterday|last\s+night"),
    ("tomorrow", r"tomorrow"),
    ("ago", _COUNT + r"\s+(?P<unit>day|week|month|year)s?\s+ago"),
    ("weekend", r"(?P<which>this|last|this\s+past)\s+weekend"),
    ("weekday", r"(?P<which>on|last|this\s+past|next)\s+(?P<wd>" + "|".join(_WEEKDAYS) + r")"),
    ("relative", r"(?P<which>this|last|next|this\s+past)\s+(?P<unit>week|month|year)"),
    (
        "month",
        r"(?:(?P<which>in|during|of|since|last|this)\s+(?:the\s+)?)?(?:(?P<part>early|mid|late)[\s-]+)?"
        r"(?:month\s+of\s+)?"
        + _MONTH.format(name="m")
        + r"(?:,?\s+(?:of\s+)?"
        + _YEAR.format(name="y")
        + ")?",
    ),
    ("year", r"(?P<which>in|during|of|since)\s+(?:the\s+year\s+)?" + _YEAR.format(name="y")),
]
_EXPRESSION = re.compile(
    r"\b(?:"
    + "|".join(f"(?P<{kind}>{pattern.replace('(?P<', f'(?P<{kind}_')})" for kind, pattern in _PATTERNS)
    + r")\b",
    re.IGNORECASE,
)
#: Each kind's named groups in :data:`_EXPRESSION`: (its name there, its own name).
_GROUPS = {
    kind: [(name, name[len(kind) + 1 :]) for name in _EXPRESSION.groupindex if name.startswith(kind + "_")]
    for kind, _ in _PATTERNS
}
#: Words every expression holds one of (a day, week, month or year word, a weekday, a
#: month's name); a number is the other kind of anchor. Finding these first is what keeps
#: a text cheap: Python's ``re`` tries every alternative of the full expression at every
#: position (~2 µs a character), so it is matched only at the few words before an anchor.
_ANCHOR_WORDS = frozenset(
    [
        *["today", "tonight", "yesterday", "tomorrow", "ago", "morning", "afternoon", "evening", "night"],
        *(f"{w}{s}" for w in ("week", "weekend", "month", "year") for s in ("", "s")),
        *_WEEKDAYS,
        *_MONTHS,
        *_MONTH_ABBR,
        "sept",
    ]
)
_TOKEN = re.compile(r"\w+")
_DIGIT = re.compile(r"\d")
_NUMBER = re.compile(r"\d{1,4}(?:st|nd|rd|th)?")
#: Words an expression can begin with before its anchor ("in", "the day before", "a few
#: days ago", "mid-August"): the full expression is tried only at these.
_STARTERS = frozenset(
    [
        *["the", "on", "in", "during", "of", "since", "last", "this", "next", "early", "mid", "late"],
        *["earlier", "a", "an", "few", "couple", *_COUNT_WORDS],
    ]
)
#: How far an expression reaches before and after its anchor word ("the day before
#: yesterday", "on the 8th of May, 2023").
_BEFORE, _AFTER = 40, 30
#: Only the start of a longer text is read for times (a question names its time early;
#: a pasted document's dates are not the question's).
SCAN_CHARS = 2000


@attrs.frozen
class TimeWindow:
    """A half-open span of time ``[start, end)`` that a text names, where in the text it
    was named (``span``), and whether the expression was relative to the text's time
    ("yesterday") rather than a date ("in May 2023")."""

    start: _dt.datetime
    end: _dt.datetime
    span: tuple[int, int]
    expression: str
    relative: bool
    #: The year was not said ("in May", "on 8 May"): the latest such time was taken.
    year_assumed: bool = False

    def cut_from(self, text: str) -> str:
        """``text`` without the expression (what is left to search by words and meaning)."""
        a, b = self.span
        return f"{text[:a]} {text[b:]}".strip()


def _midnight(at: _dt.datetime) -> _dt.datetime:
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(year: int, month: int, tz: _dt.tzinfo | None) -> _dt.datetime:
    while month < 1:
        year, month = year - 1, month + 12
    while month > 12:
        year, month = year + 1, month - 12
    return _dt.datetime(year, month, 1, tzinfo=tz)


def _count(raw: str) -> tuple[int, int]:
    """How many (lowest, highest) a count word means."""
    if raw.isdigit():
        return int(raw), int(raw)
    if raw == "a few":
        return 2, 4
    return _NUMBERS[raw], _NUMBERS[raw]


def _month_number(name: str) -> int:
    """1 to 12 for a lower-case month name or abbreviation."""
    return _MONTH_ABBR[name[:3]]


_Span = tuple[_dt.datetime, _dt.datetime]
_DAY_LENGTH = _dt.timedelta(days=1)


def _months(year: int, month: int, count: int, tz: _dt.tzinfo | None) -> _Span:
    """``count`` calendar months from ``month`` of ``year`` (``month`` may run past 1..12)."""
    return _month_start(year, month, tz), _month_start(year, month + count, tz)


def _years(year: int, count: int, tz: _dt.tzinfo | None) -> _Span:
    return _dt.datetime(year, 1, 1, tzinfo=tz), _dt.datetime(year + count, 1, 1, tzinfo=tz)


def _date(kind: str, g: dict[str, str], now: _dt.datetime) -> tuple[_Span, bool] | None:
    """A day given as a date ("2023-05-08", "8 May", "May 8th, 2023"), and whether its
    year was assumed (the latest such day not after ``now``); ``None`` if no such day."""
    month = int(g["m"]) if kind == "iso" else _month_number(g["m"])
    year = int(g["y"]) if g["y"] else now.year
    try:
        start = _dt.datetime(year, month, int(g["d"]), tzinfo=now.tzinfo)
        if not g["y"] and start > now:
            start = start.replace(year=year - 1)
    except ValueError:  # 31 February; 29 February of a common year
        return None
    return (start, start + _DAY_LENGTH), not g["y"]


def _relative(kind: str, g: dict[str, str], now: _dt.datetime) -> _Span:
    """A time relative to ``now`` ("yesterday", "two weeks ago", "last Friday")."""
    tz = now.tzinfo
    day = _DAY_LENGTH
    today = _midnight(now)
    week = today - today.weekday() * day  # this week's Monday
    fixed = {"today": 0, "yesterday": -1, "day_before_yesterday": -2, "tomorrow": 1}
    if kind in fixed:
        start = today + fixed[kind] * day
        return start, start + day
    if kind == "ago":
        low, high = _count(g["n"])
        if g["unit"] == "day":
            return today - high * day, today - (low - 1) * day
        if g["unit"] == "week":
            return week - high * 7 * day, week - (low - 1) * 7 * day
        if g["unit"] == "month":
            return _months(now.year, now.month - high, high - low + 1, tz)
        return _years(now.year - high, high - low + 1, tz)
    if kind == "weekend":
        saturday = week + 5 * day if g["which"] == "this" else week - 2 * day
        return saturday, saturday + 2 * day
    if kind == "weekday":
        target = _WEEKDAYS.index(g["wd"])
        if g["which"] == "next":
            start = today + ((target - now.weekday()) % 7 or 7) * day
        else:  # the latest such day before today
            start = today - ((now.weekday() - target) % 7 or 7) * day
        return start, start + day
    step = {"this": 0, "this past": -1, "last": -1, "next": 1}[g["which"]]
    if g["unit"] == "week":
        start = week + step * 7 * day
        return start, start + 7 * day
    if g["unit"] == "month":
        return _months(now.year, now.month + step, 1, tz)
    return _years(now.year + step, 1, tz)


def _named(kind: str, g: dict[str, str], now: _dt.datetime) -> tuple[_Span, bool] | None:
    """A month or year named ("in May", "May 2023", "in 2022", "since March"), and whether
    the year was assumed; ``None`` for a bare month name (too often a word: "may")."""
    tz = now.tzinfo
    assumed = False
    if kind == "year":
        start, end = _years(int(g["y"]), 1, tz)
    else:
        month = _month_number(g["m"])
        if g["y"]:
            year = int(g["y"])
        elif g["which"] or g["part"]:
            assumed = True
            year = now.year if month <= now.month else now.year - 1
            if g["which"] == "last" and month == now.month:
                year -= 1
        else:
            return None
        start, end = _months(year, month, 1, tz)
    if g["which"] == "since":
        end = _midnight(now) + _DAY_LENGTH
    return (start, end), assumed


def _window(kind: str, g: dict[str, str], now: _dt.datetime) -> tuple[_Span, bool, bool] | None:
    """(span, relative, year_assumed) of one matched expression, or ``None`` when it names
    no valid time."""
    if kind in ("iso", "day_month", "month_day"):
        dated = _date(kind, g, now)
        return None if dated is None else (dated[0], False, dated[1])
    if kind in ("month", "year"):
        named = _named(kind, g, now)
        return None if named is None else (named[0], False, named[1])
    return _relative(kind, g, now), True, False


def _anchors(text: str) -> Iterator[tuple[int, int]]:
    """Where the words that can anchor an expression are in ``text``."""
    lowered = text.lower()
    if _ANCHOR_WORDS.isdisjoint(_TOKEN.findall(lowered)) and not _DIGIT.search(text):
        return  # most texts: one pass in C, no Python loop
    for token in _TOKEN.finditer(text):
        word = token.group().lower()
        if word in _ANCHOR_WORDS or (word[0].isdigit() and _NUMBER.fullmatch(word)):
            yield token.span()


def _windows(text: str, now: _dt.datetime) -> Iterator[TimeWindow]:
    """Every expression in (the start of) ``text``, in order, as a window relative to
    ``now``."""
    text = text[:SCAN_CHARS]
    covered = 0  # the end of the last expression found
    for first, last in _anchors(text):
        if first < covered:
            continue
        # The expression holding this anchor starts at one of the words just before it
        # (the leftmost that matches wins: "the day before yesterday", not "yesterday").
        lo = max(covered, first - _BEFORE)
        hi = min(len(text), last + _AFTER)
        starts = [m.start() for m in _TOKEN.finditer(text, lo, first) if m.group().lower() in _STARTERS]
        for start in [*starts, first]:
            match = _EXPRESSION.match(text, start, hi)
            if match is None or match.end() < last:
                continue
            window = _made(match, now)
            if window is not None:
                covered = match.end()
                yield window
            break


def _made(match: re.Match[str], now: _dt.datetime) -> TimeWindow | None:
    """The window of one matched expression, or ``None`` when it names no valid time."""
    kind = match.lastgroup
    if kind is None:
        return None
    groups: dict[str, str] = defaultdict(str)
    for name, short in _GROUPS[kind]:
        value = match.group(name)
        if value:
            groups[short] = " ".join(value.lower().split())
    made = _window(kind, groups, now)
    if made is None:
        return None
    (start, end), relative, assumed = made
    return TimeWindow(start, end, match.span(), match.group(0), relative, assumed)


def query_window(query: str, now: _dt.datetime) -> TimeWindow | None:
    """The time ``query`` asks about (its first time expression), relative to ``now`` (an
    aware time), or ``None``."""
    return next(_windows(query, now), None)


def mentioned_window(text: str, said_at: _dt.datetime) -> TimeWindow | None:
    """The time a fact's ``text``, said at ``said_at``, speaks of: its first relative
    expression or date with a year ("yesterday", "on 8 May 2023"), or ``None``."""
    # Only the start of a text is scanned: the key stays small. Equal times in two time
    # zones are equal datetimes, but not the same days: the zone is part of the key.
    return _mentioned_window(text[:SCAN_CHARS], said_at, said_at.tzinfo)


@lru_cache(maxsize=4096)
def _mentioned_window(text: str, said_at: _dt.datetime, _zone: _dt.tzinfo | None) -> TimeWindow | None:
    """:func:`mentioned_window`, remembered: a fact is read when it is indexed and each time
    it is injected (its line's note), the same text at the same time (issue 37)."""
    for window in _windows(text, said_at):
        if not window.year_assumed:
            return window
    return None


#: Month and weekday names: capitalised, but no one's name (:mod:`memtap.longterm.answerable`).
CALENDAR_WORDS = frozenset([*_MONTHS, *_WEEKDAYS])

#: Any fixed time: :func:`speaks_of_a_time` asks only whether an expression is there.
_ANY_NOW = _dt.datetime(2000, 1, 1, tzinfo=_dt.timezone.utc)


def speaks_of_a_time(text: str) -> bool:
    """Whether ``text`` holds a time expression ("on 16 September", "next month", "this
    Friday", "in 2025"), whatever time it is relative to."""
    return next(_windows(text, _ANY_NOW), None) is not None


_DAY_OF_MONTH = re.compile(r"\b(?:[1-9]|[12]\d|3[01])(?:st|nd|rd|th)\b", re.IGNORECASE)


def speaks_of_a_day(text: str) -> bool:
    """Whether ``text`` names a day ("on 23 September", "the 14th", "next Friday",
    "tomorrow"), not only a longer time ("the end of September")."""
    if _DAY_OF_MONTH.search(text):
        return True
    return any(w.end - w.start <= _dt.timedelta(days=1) for w in _windows(text, _ANY_NOW))


def resolved_note(text: str, said_at: _dt.datetime) -> str:
    """What a relative expression in ``text`` meant when it was said ("yesterday =
    2023-05-07", "last week = 2023-05-01..2023-05-07"), or ``""``: shown with the fact so
    that the model reads "yesterday" as the day it was, not the day before the call."""
    window = mentioned_window(text, said_at)
    if window is None or not window.relative:
        return ""
    first = window.start.date()
    last = (window.end - _dt.timedelta(days=1)).date()
    when = first.isoformat() if first == last else f"{first.isoformat()}..{last.isoformat()}"
    return f"{' '.join(window.expression.split()).lower()} = {when}"


_PRESENT = re.compile(
    r"\b(?:now|nowadays|these days|at the moment|at present|currently|current|right now|"
    r"any ?more|still|latest|most recent|lately|in the end)\b",
    re.IGNORECASE,
)


def asks_present(question: str) -> bool:
    """Whether ``question`` asks how things are now ("where do I live now?", "what's my
    job these days?", "am I still vegan?"), or how a change turned out ("what was my due
    date in the end?"): when two facts answer it, the newer one says how things are
    (:attr:`memtap.longterm.index.Fusion.present_boost`). "Ended up" is not such a cue: it
    asks how one event went ("what did they end up playing?")."""
    return _PRESENT.search(question) is not None
