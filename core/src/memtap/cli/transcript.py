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

A transcript's identity is its content, not its file name: messages that name no session
go to ``import-<hash of the first message>`` (its role, text and time), so a renamed or
copied file, or the same file grown by new turns, imports only what is new.

The file is read twice, line by line (:func:`scan_transcript` checks every line first:
nothing is imported from a file with a bad line; then :func:`messages_of` and
:func:`iter_turns` stream it into :func:`import_turns`), so memory does not grow with the
file: what is held is one pending turn per open session and a 16-byte digest per turn
already stored in the sessions imported into.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from memtap.errors import MemtapError
from memtap.formats.content import role_and_text
from memtap.protocol.model import Exchange, Message, Role, aware
from memtap.redact import redact_exchange, redact_id
from memtap.storage.storable import storable, unstorable_characters

if TYPE_CHECKING:
    from memtap.memory import Memory

__all__ = [
    "ImportReport",
    "ImportStalledError",
    "TranscriptError",
    "TranscriptScan",
    "Turn",
    "import_turns",
    "iter_turns",
    "messages_of",
    "read_transcript",
    "scan_transcript",
    "transcript_session",
    "turns_of",
]

TIME_KEYS = ("at", "timestamp", "created_at")
SESSION_KEYS = ("session_id", "session")
#: Epoch numbers above this are milliseconds (10^11 seconds is the year 5138).
_MILLISECONDS_FROM = 1e11


#: Bad lines kept (with what is wrong) when a transcript is refused; the rest are counted.
MAX_PROBLEMS = 1000
#: Turns captured between two waits for the writer (the import's memory stays bounded).
IMPORT_BATCH = 1000
#: Turns left in flight (written or memorized while the next batch is read) at each wait.
IMPORT_BACKLOG = 250
#: MB a store that can bound its memory (``Store.bound_memory``: DuckDB) may hold during an
#: import; its cache otherwise grows with the file (100 MB of transcript: +600 MB).
IMPORT_STORE_MB = 64
#: Messages a transcript may have for its facts to be embedded during the import (above,
#: embedding is deferred: :meth:`memtap.longterm.recall.RecallEngine.deferring_embedding`).
IMPORT_EMBED_MESSAGES = 1000
#: Seconds the store may take nothing at all before an import gives up.
STALL_SECONDS = 60.0


class TranscriptError(MemtapError, ValueError):
    """Lines of a transcript that cannot be read; ``problems`` holds one ``(line number,
    what is wrong)`` per bad line (the first :data:`MAX_PROBLEMS`; ``bad_lines`` counts
    them all)."""

    def __init__(
        self, source: str, problems: Sequence[tuple[int, str]], bad_lines: int | None = None
    ) -> None:
        self.source = source
        self.problems = list(problems)
        self.bad_lines = len(self.problems) if bad_lines is None else bad_lines
        super().__init__(f"{source}: {self.bad_lines} line(s) cannot be read; nothing was imported")


class ImportStalledError(MemtapError):
    """The store took none of an import's turns for :data:`STALL_SECONDS`."""


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
    """What an import did: turns captured now, turns the store already held, sessions,
    and how many of the facts it stored are left to embed (recallable by words now, by
    meaning once the process that next loads the entity's index has embedded them)."""

    new: int
    present: int
    sessions: int
    unembedded: int = 0


def _zulu(text: str) -> str:
    """``text`` with a trailing ``Z`` (UTC) spelled ``+00:00``: Python 3.10's
    ``fromisoformat`` reads only the latter."""
    return text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text


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
            return aware(_dt.datetime.fromisoformat(_zulu(value.strip())))
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


def _parsed(lines: Iterable[str]) -> Iterator[tuple[int, TranscriptMessage | None, str | None]]:
    """Each non-blank line's number, and its message or what is wrong with it."""
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:
            yield number, None, f"not JSON ({exc})"
            continue
        try:
            yield number, _message(record, number), None
        except ValueError as exc:
            yield number, None, str(exc)


@attrs.frozen
class TranscriptScan:
    """What a first pass over a transcript found: its first message (``None``: none), how
    many messages it has, the sessions its messages name, and whether some name none."""

    first: TranscriptMessage | None
    messages: int
    sessions: frozenset[str]
    unnamed: bool


def scan_transcript(lines: Iterable[str], source: str = "transcript") -> TranscriptScan:
    """Check every line of a JSONL transcript, holding none of them. Raises
    :class:`TranscriptError` listing the bad lines (nothing is half-read)."""
    first: TranscriptMessage | None = None
    count = bad = 0
    unnamed = False
    sessions: set[str] = set()
    problems: list[tuple[int, str]] = []
    for number, message, problem in _parsed(lines):
        if message is None:
            bad += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append((number, problem or "unreadable"))
            continue
        count += 1
        first = first or message
        if message.session_id is None:
            unnamed = True
        else:
            sessions.add(message.session_id)
    if bad:
        raise TranscriptError(source, problems, bad)
    return TranscriptScan(first, count, frozenset(sessions), unnamed)


def messages_of(lines: Iterable[str], source: str = "transcript") -> Iterator[TranscriptMessage]:
    """Every message of a transcript, in file order, one line at a time (a bad line raises
    :class:`TranscriptError`: check the file with :func:`scan_transcript` first)."""
    for number, message, problem in _parsed(lines):
        if message is None:
            raise TranscriptError(source, [(number, problem or "unreadable")])
        yield message


def read_transcript(lines: Iterable[str], source: str = "transcript") -> list[TranscriptMessage]:
    """Every message of a JSONL transcript, in file order. Raises :class:`TranscriptError`
    listing every bad line (nothing is half-read)."""
    messages: list[TranscriptMessage] = []
    problems: list[tuple[int, str]] = []
    for number, message, problem in _parsed(lines):
        if message is None:
            problems.append((number, problem or "unreadable"))
        else:
            messages.append(message)
    if problems:
        raise TranscriptError(source, problems)
    return messages


def transcript_session(first: TranscriptMessage) -> str:
    """The session of a transcript's messages that name none: ``import-`` and a hash of its
    first message (role, text, time), so that a renamed copy is the same transcript."""
    identity = json.dumps([first.role, first.content, first.at.isoformat()], ensure_ascii=True)
    return "import-" + hashlib.sha256(identity.encode()).hexdigest()[:16]


def iter_turns(messages: Iterable[TranscriptMessage], default_session: str) -> Iterator[Turn]:
    """Pair messages into turns, per session, in file order (see the module's docstring),
    yielding each turn once it is complete (the last ones at the end)."""
    pending: dict[str, tuple[list[TranscriptMessage], list[TranscriptMessage]]] = {}

    def close(session: str) -> Turn:
        asked, answered = pending.pop(session)
        first = (asked or answered)[0]
        return Turn(
            session,
            first.at,
            tuple(Message(m.role, m.content) for m in asked),
            tuple(Message(m.role, m.content) for m in answered),
        )

    for m in messages:
        session = m.session_id or default_session
        asked, answered = pending.setdefault(session, ([], []))
        if m.role == "assistant":
            answered.append(m)
            continue
        if answered:  # a new question after an answer: the turn before is complete
            yield close(session)
            asked, answered = pending.setdefault(session, ([], []))
        asked.append(m)
    for session in list(pending):
        yield close(session)


def turns_of(messages: Iterable[TranscriptMessage], default_session: str) -> list[Turn]:
    """Pair messages into turns, per session, in file order (see the module's docstring)."""
    return list(iter_turns(messages, default_session))


def _key(exchange: Exchange) -> bytes:
    """What makes two exchanges the same turn (time, and their messages' roles and texts),
    as a 16-byte digest: an import holds one per stored turn, not the turn's text."""
    key = (
        exchange.started_at.astimezone(_dt.timezone.utc).isoformat(),
        [(m.role, m.content) for m in exchange.input],
        [(m.role, m.content) for m in exchange.output],
    )
    return hashlib.blake2b(json.dumps(key, ensure_ascii=True).encode(), digest_size=16).digest()


def import_turns(
    mem: Memory,
    turns: Iterable[Turn],
    *,
    entity_id: str,
    sessions: Iterable[str] | None = None,
    also_in: Iterable[str] = (),
    stall: float = STALL_SECONDS,
    embed: bool = True,
) -> ImportReport:
    """Capture each turn not stored yet through :meth:`Memory.capture` (with its time),
    then wait until everything is written and memorized.

    ``sessions`` are the sessions the turns go to (``None``: the turns are read first to
    find them); a turn already stored in one of them, or in a session of ``also_in`` (where
    an earlier version imported the same file), is skipped. Turns are captured in batches,
    each written before the next is read, so memory does not grow with their number.
    Raises :class:`ImportStalledError` when the store takes nothing for ``stall`` seconds
    (what was stored stays; importing again skips it).

    With ``embed`` the facts stored are embedded before it returns (as long as the
    embedder keeps up within ``10 * stall`` seconds); without, they are left to embed
    (:attr:`ImportReport.unembedded`): a local model embeds a few hundred texts a second
    at best, a large transcript's facts arrive faster, and the embedder's model would
    double the import's memory."""
    engine = mem.longterm.engine
    with contextlib.ExitStack() as stack:
        if not embed:
            stack.enter_context(engine.deferring_embedding())
        report = _import_turns(
            mem, turns, entity_id=entity_id, sessions=sessions, also_in=also_in, stall=stall
        )
    if embed and engine.worker is not None:
        engine.worker.flush(10 * stall)
    return attrs.evolve(report, unembedded=0 if embed else engine.deferred)


def _import_turns(
    mem: Memory,
    turns: Iterable[Turn],
    *,
    entity_id: str,
    sessions: Iterable[str] | None,
    also_in: Iterable[str],
    stall: float,
) -> ImportReport:
    if sessions is None:
        turns = list(turns)
        sessions = {t.session_id for t in turns}
    named = sorted(set(sessions))
    refused = unstorable_characters(mem.store)
    bound_memory = getattr(mem.store, "bound_memory", None)
    if callable(bound_memory):
        bound_memory(IMPORT_STORE_MB)
    stored: Counter[bytes] = Counter()
    for session in sorted({*named, *also_in}):
        stored.update(
            _key(e)
            for e in mem.store.exchanges(
                entity_id=redact_id(entity_id), session_id=storable(redact_id(session), refused)
            )
        )
    new = present = 0
    for turn in turns:
        # The key of what would be stored (capture redacts the turn, the writer makes it storable).
        candidate = Exchange(
            attribution=mem.current_attribution(),
            provider="app",
            operation="chat",
            input=turn.input,
            output=turn.output,
            started_at=turn.at,
            ended_at=turn.at,
        )
        key = _key(storable(redact_exchange(candidate), refused))
        if stored[key] > 0:
            stored[key] -= 1
            present += 1
            continue
        mem.capture(
            list(turn.input), list(turn.output), entity_id=entity_id, session_id=turn.session_id, at=turn.at
        )
        new += 1
        if new % IMPORT_BATCH == 0:
            _settle(mem, stall, backlog=IMPORT_BACKLOG)
    _settle(mem, stall)
    return ImportReport(new=new, present=present, sessions=len(named))


def _settle(mem: Memory, stall: float, backlog: int = 0) -> None:
    """Wait until at most ``backlog`` captured turns are not taken by the writer (stored or
    quarantined; with no backlog, a flush), as long as it makes progress (raise
    :class:`ImportStalledError` after ``stall`` seconds without any), then until memorize
    has at most ``backlog`` of them left (its queue would otherwise hold the whole file's
    exchanges: most of an import's memory). A backlog keeps the writer and memorize busy
    while the next turns are read."""
    stats = mem.writer.stats

    def progress() -> int:
        return stats.written + stats.quarantined + stats.dropped + stats.unformatted

    def taken(timeout: float) -> bool:
        return mem.writer.wait_backlog(backlog, timeout) if backlog else mem.writer.flush(timeout)

    last, since = progress(), time.monotonic()
    while not taken(min(1.0, stall)):
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= stall:
            raise ImportStalledError(
                f"the store {mem.url} took none of the imported turns for {stall:.0f} s "
                f"({stats.captured - progress()} waiting): check that it is reachable, then run "
                "the import again (turns already stored are skipped)"
            )
    learned = mem.longterm.wait_backlog(backlog, 10 * stall) if backlog else mem.longterm.flush(10 * stall)
    if not learned:
        raise ImportStalledError(
            f"the imported turns are stored, but learning from them did not finish in {10 * stall:.0f} s "
            "(is the LLM that memorizes reachable?); importing again skips what is stored"
        )
