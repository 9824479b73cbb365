"""Importing an existing conversation transcript (``memtap import-transcript``): a JSONL
file of timestamped messages, paired into turns and stored through the public
:meth:`memtap.Memory.capture` path with each turn's time (``at=``), so that it becomes
memory exactly as a live conversation would (history, episodes with their neighbouring
turns and dates, facts when an LLM port is configured).

One JSON object per line (blank lines are skipped)::

    {"role": "user", "content": "I adopted a beagle", "at": "2023-05-08T13:56:00Z"}
    {"role": "assistant", "content": "Congratulations!", "timestamp": 1683554170}

- ``role``: ``user``, ``assistant``, ``system`` or ``tool``;
- ``content``: a string, or a list of parts (``{"type": "text", "text": ...}``; other parts
  become ``[type]`` markers, as in captured calls);
- the time, as ``at``, ``timestamp`` or ``created_at``: an ISO 8601 string (a time without
  a zone is UTC) or a number of seconds since 1970 (milliseconds when it is larger than
  10^11);
- optionally ``session_id`` (or ``session``): the conversation the message belongs to.

Turns: within a session, in file order, the messages up to an assistant message (user,
system, tool) are a turn's input and the assistant messages that follow its output; the
turn's time is that of its first message. Importing is idempotent: a turn whose session
already holds an exchange with the same time and the same messages (after redaction) is
not captured again.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from memtap.errors import MemtapError
from memtap.formats.content import role_and_text
from memtap.protocol.model import Exchange, Message, Role, aware
from memtap.redact import redact_exchange, redact_id

if TYPE_CHECKING:
    from memtap.memory import Memory

__all__ = ["ImportReport", "TranscriptError", "Turn", "import_turns", "read_transcript", "turns_of"]

TIME_KEYS = ("at", "timestamp", "created_at")
SESSION_KEYS = ("session_id", "session")
#: Epoch numbers above this are milliseconds (10^11 seconds is the year 5138).
_MILLISECONDS_FROM = 1e11


class TranscriptError(MemtapError, ValueError):
    """Lines of a transcript that cannot be read; ``problems`` holds one ``(line number,
    what is wrong)`` per bad line."""

    def __init__(self, source: str, problems: Sequence[tuple[int, str]]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(f"{source}: {len(self.problems)} line(s) cannot be read; nothing was imported")


@attrs.frozen
class TranscriptMessage:
    """One message of a transcript: who said what when, in which session (``None``: the
    import's default), and on which line of the file."""

    role: Role
    content: str
    at: _dt.datetime
    session_id: str | None
    line: int


@attrs.frozen
class Turn:
    """What is captured as one exchange: the messages up to an answer, the answer, and
    when the turn began."""

    session_id: str
    at: _dt.datetime
    input: tuple[Message, ...]
    output: tuple[Message, ...]


@attrs.frozen
class ImportReport:
    """What an import did: turns captured now, turns the store already held, sessions."""

    new: int
    present: int
    sessions: int


def _time(value: Any) -> _dt.datetime:
    """A message's time from an ISO 8601 string or epoch seconds (or milliseconds)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a time")
        seconds = value / 1000 if abs(value) >= _MILLISECONDS_FROM else value
        return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc)
    if isinstance(value, str):
        try:
            return aware(_dt.datetime.fromisoformat(value.strip()))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2023-05-08T13:56:00Z)") from None
    raise ValueError(f"{value!r} is not a time (an ISO 8601 string or seconds since 1970)")


def _message(record: Any, line: int) -> TranscriptMessage:
    """One line's message; raises ``ValueError`` saying what is wrong with it."""
    if not isinstance(record, Mapping):
        raise ValueError(f"expected a JSON object with role, content and at, got {type(record).__name__}")
    role, text = role_and_text(record)
    key = next((k for k in TIME_KEYS if record.get(k) is not None), None)
    if key is None:
        raise ValueError(
            f"no time: give {' or '.join(repr(k) for k in TIME_KEYS[:2])} (ISO 8601, or seconds since 1970)"
        )
    try:
        at = _time(record[key])
    except (ValueError, OverflowError, OSError) as exc:
        raise ValueError(f"{key}: {exc}") from None
    session = next((record[k] for k in SESSION_KEYS if record.get(k) is not None), None)
    if session is not None and (not isinstance(session, str) or not session.strip()):
        raise ValueError(f"session_id must be a non-empty string, not {session!r}")
    return TranscriptMessage(role, text, at, session, line)


def read_transcript(lines: Iterable[str], source: str = "transcript") -> list[TranscriptMessage]:
    """Every message of a JSONL transcript, in file order. Raises :class:`TranscriptError`
    listing every bad line (nothing is half-read)."""
    messages: list[TranscriptMessage] = []
    problems: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:
            problems.append((number, f"not JSON ({exc})"))
            continue
        try:
            messages.append(_message(record, number))
        except ValueError as exc:
            problems.append((number, str(exc)))
    if problems:
        raise TranscriptError(source, problems)
    return messages


def turns_of(messages: Iterable[TranscriptMessage], default_session: str) -> list[Turn]:
    """Pair messages into turns, per session, in file order (see the module's docstring)."""
    pending: dict[str, tuple[list[TranscriptMessage], list[TranscriptMessage]]] = {}
    out: list[Turn] = []

    def close(session: str) -> None:
        asked, answered = pending.pop(session)
        first = (asked or answered)[0]
        out.append(
            Turn(
                session,
                first.at,
                tuple(Message(m.role, m.content) for m in asked),
                tuple(Message(m.role, m.content) for m in answered),
            )
        )

    for m in messages:
        session = m.session_id or default_session
        asked, answered = pending.setdefault(session, ([], []))
        if m.role == "assistant":
            answered.append(m)
            continue
        if answered:  # a new question after an answer: the turn before is complete
            close(session)
            asked, answered = pending.setdefault(session, ([], []))
        asked.append(m)
    for session in list(pending):
        close(session)
    return out


def _key(exchange: Exchange) -> tuple[Any, ...]:
    """What makes two exchanges the same turn: time, and their messages' roles and texts."""
    return (
        exchange.started_at.astimezone(_dt.timezone.utc),
        tuple((m.role, m.content) for m in exchange.input),
        tuple((m.role, m.content) for m in exchange.output),
    )


def import_turns(mem: Memory, turns: Sequence[Turn], *, entity_id: str) -> ImportReport:
    """Capture each turn not stored yet through :meth:`Memory.capture` (with its time),
    then wait until everything is written and memorized."""
    sessions = sorted({t.session_id for t in turns})
    stored: Counter[tuple[Any, ...]] = Counter()
    for session in sessions:
        stored.update(
            _key(e)
            for e in mem.store.exchanges(entity_id=redact_id(entity_id), session_id=redact_id(session))
        )
    new = present = 0
    for turn in turns:
        # The key of what capture would store (capture redacts the turn first).
        candidate = Exchange(
            attribution=mem.current_attribution(),
            provider="app",
            operation="chat",
            input=turn.input,
            output=turn.output,
            started_at=turn.at,
            ended_at=turn.at,
        )
        key = _key(redact_exchange(candidate))
        if stored[key] > 0:
            stored[key] -= 1
            present += 1
            continue
        mem.capture(
            list(turn.input), list(turn.output), entity_id=entity_id, session_id=turn.session_id, at=turn.at
        )
        new += 1
    mem.flush(timeout=None)
    return ImportReport(new=new, present=present, sessions=len(sessions))
