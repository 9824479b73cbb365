"""The recall benchmarks' data: LOCOMO, the paraphrase set and the LongMemEval-shaped set
(``benchmarks/longmem/``) read into one shape, and the two public ways to store a person's
conversations in a ``memtap.Memory`` (``capture`` and ``remember``).

A :class:`Person` is one entity's memory: its turns in time order (each with the session it
belongs to) and the questions asked about them, each with the turns that answer it.
``locomo_recall.py`` and ``memory_eval.py`` use it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import memtap
from memtap.protocol.model import Message
from memtap.testing import paraphrases

UTC = _dt.timezone.utc
LOCOMO_DATA = "/work/shared/data/locomo/locomo10.json"
#: LOCOMO's question categories kept (5, adversarial, has no evidence turns).
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
#: LOCOMO's halves: conversations 0-4 tune, 5-9 held out.
LOCOMO_TUNE = range(0, 5)
LONGMEM_KINDS = ("single", "multi", "update", "temporal", "paraphrase", "preference", "abstention")
#: When the paraphrase set's facts are said (a minute apart, in the set's order).
PARAPHRASE_T0 = _dt.datetime(2025, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Turn:
    """One turn: ``role`` is who said it in the capture path's (user, assistant) pairs.
    ``remembered_at`` is the time the ``remember`` path gives it when that differs from
    ``at`` (LOCOMO's, as ``locomo_recall.py`` always dated them)."""

    id: str
    role: str
    text: str
    session: str
    at: _dt.datetime
    remembered_at: _dt.datetime | None = None


@dataclass(frozen=True)
class Question:
    """A question asked at ``asked_at``; ``evidence`` are the ids of the turns that answer it
    (none: never answered), ``stale`` those of older statements it replaced."""

    id: str
    kind: str
    question: str
    asked_at: _dt.datetime
    evidence: tuple[str, ...]
    stale: tuple[str, ...] = ()


@dataclass
class Person:
    """One entity's conversations (turns in time order, sessions contiguous) and questions."""

    id: str
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)


def norm(text: str) -> str:
    """A text compared as memtap compares units: whitespace collapsed, lower case."""
    return " ".join(text.split()).lower()


def ids_by_text(turns: Iterable[Turn]) -> dict[str, set[str]]:
    """The ids of the turns of each (normalised) text: identical turns are one unit."""
    out: dict[str, set[str]] = {}
    for t in turns:
        out.setdefault(norm(t.text), set()).add(t.id)
    return out


def sessions_of(turns: Sequence[Turn]) -> dict[str, list[Turn]]:
    """Turns per session, sessions in order of their first turn."""
    out: dict[str, list[Turn]] = {}
    for t in turns:
        out.setdefault(t.session, []).append(t)
    return out


# -- the two public ways in --------------------------------------------------------------


def store_by_capture(mem: memtap.Memory, person: Person) -> None:
    """Each session's turns as consecutive (user, assistant) pairs through
    ``Memory.capture`` at the pair's first turn's time (a last lone turn alone); the caller
    flushes (memorize makes the episodes)."""
    for session, said in sessions_of(person.turns).items():
        for n in range(0, len(said), 2):
            pair = said[n : n + 2]
            answer = [Message("assistant", t.text) for t in pair[1:]]
            mem.capture(
                [Message("user", pair[0].text)],
                answer,
                entity_id=person.id,
                session_id=session,
                at=pair[0].at,
            )


def store_by_remember(mem: memtap.Memory, person: Person, window: int = 2) -> None:
    """``Memory.remember`` every turn, with the ``window`` turns on either side in its
    session as context, at its time."""
    ts = person.turns
    for i, turn in enumerate(ts):
        near = [
            ts[j].text
            for j in range(max(0, i - window), min(len(ts), i + window + 1))
            if j != i and ts[j].session == turn.session
        ]
        mem.remember(
            turn.text, entity_id=person.id, context="\n".join(near), at=turn.remembered_at or turn.at
        )


# -- LOCOMO ------------------------------------------------------------------------------


def locomo_session_time(date: str, offset: int) -> _dt.datetime:
    """A session's date ("1:56 pm on 8 May, 2023") as a UTC time, plus ``offset`` minutes."""
    start = _dt.datetime.strptime(date, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    return start + _dt.timedelta(minutes=offset)


def locomo_turns(conversation: dict[str, Any]) -> list[tuple[str, str, str, str, int]]:
    """(dia_id, speaker, text, session date, session number) for every turn, in order
    (a shared photo's caption appended to its turn)."""
    out = []
    s = 1
    while f"session_{s}" in conversation:
        date = conversation.get(f"session_{s}_date_time", "")
        for t in conversation[f"session_{s}"]:
            text = t["text"]
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            out.append((t["dia_id"], t["speaker"], text, date, s))
        s += 1
    return out


def locomo_asked_at(conversation: dict[str, Any]) -> _dt.datetime:
    """When the questions are asked: the day after the conversation's last session."""
    s = 1
    while f"session_{s + 1}" in conversation:
        s += 1
    return locomo_session_time(conversation[f"session_{s}_date_time"], 0) + _dt.timedelta(days=1)


def locomo_person(sample: dict[str, Any]) -> Person:
    """A LOCOMO conversation as one entity: turns "Speaker: text", in pairs by position in
    their session (the first of a pair is the user's), dated at the session's time plus
    the turn's position in it (minutes; the ``remember`` path: plus its position in the
    whole conversation); questions of categories 1-4, asked the day after the last session."""
    conversation = sample["conversation"]
    turns: list[Turn] = []
    position: dict[int, int] = {}
    for i, (dia_id, speaker, text, date, session) in enumerate(locomo_turns(conversation)):
        n = position.get(session, 0)
        position[session] = n + 1
        pair_start = n - n % 2
        turns.append(
            Turn(
                id=dia_id,
                role="user" if n % 2 == 0 else "assistant",
                text=f"{speaker}: {text}",
                session=f"session_{session}",
                at=locomo_session_time(date, pair_start),
                remembered_at=locomo_session_time(date, i),
            )
        )
    now = locomo_asked_at(conversation)
    questions = [
        Question(
            id=f"{sample['sample_id']}-q{n}",
            kind=LOCOMO_CATEGORIES[qa["category"]],
            question=qa["question"],
            asked_at=now,
            evidence=tuple(qa["evidence"]),
        )
        for n, qa in enumerate(sample["qa"])
        if qa["category"] in LOCOMO_CATEGORIES
    ]
    return Person(sample["sample_id"], turns, questions)


def locomo_people(path: str | Path, half: str = "all") -> list[Person]:
    """LOCOMO's conversations of ``half`` (``tune``: 0-4, ``heldout``: 5-9, ``all``)."""
    data = json.loads(Path(path).read_text())
    keep = [i for i in range(len(data)) if half == "all" or (i in LOCOMO_TUNE) == (half == "tune")]
    return [locomo_person(data[i]) for i in keep]


# -- the paraphrase set --------------------------------------------------------------------


def paraphrase_people(half: str = "all") -> list[Person]:
    """``memtap.testing.paraphrases`` as one user's facts, each said alone in a session of
    its own a minute after the previous one: the pairs of ``half`` (even positions tune,
    odd held out) and every distractor; each pair's question asked a day after the last."""
    every = paraphrases.facts()
    pairs = [i for i in range(len(paraphrases.PAIRS)) if half == "all" or (i % 2 == 0) == (half == "tune")]
    said = [*pairs, *range(len(paraphrases.PAIRS), len(every))]
    turns = [Turn(f"p{i}", "user", every[i], f"p{i}", PARAPHRASE_T0 + _dt.timedelta(minutes=i)) for i in said]
    asked = PARAPHRASE_T0 + _dt.timedelta(days=1, minutes=len(every))
    questions = [Question(f"pq{i}", "paraphrase", paraphrases.PAIRS[i][1], asked, (f"p{i}",)) for i in pairs]
    return [Person("paraphrase-user", turns, questions)]


# -- the LongMemEval-shaped set --------------------------------------------------------------


class LongmemFormatError(ValueError):
    """A file of ``benchmarks/longmem`` does not follow its README's format."""


def longmem_half(user_id: str) -> str:
    """``tune`` when the first hex digit of sha256(user id) is even, else ``heldout``."""
    return "tune" if int(hashlib.sha256(user_id.encode()).hexdigest()[0], 16) % 2 == 0 else "heldout"


def _time(value: str, where: str) -> _dt.datetime:
    try:
        parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        raise LongmemFormatError(f"{where}: {value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def place_filler(user: dict[str, Any], filler: dict[str, dict[str, Any]], where: str) -> list[Turn]:
    """The user's filler sessions dated inside its timeline: each at a time drawn uniformly
    from 30 days before its first session to 30 days after its last (never after the first
    question is asked), seeded by the user's id; turns a minute apart, named
    ``<user>-<filler id>-<n>``."""
    ids = list(user.get("filler", []))
    if not ids:
        return []
    starts = sorted(_time(s["date"], where) for s in user["sessions"])
    end = starts[-1] + _dt.timedelta(days=30)
    asked = [_time(q["asked_at"], where) for q in user.get("questions", [])]
    if asked:
        end = min(end, min(asked) - _dt.timedelta(hours=1))
    start = starts[0] - _dt.timedelta(days=30)
    span = max(0.0, (end - start).total_seconds())
    rng = random.Random(hashlib.sha256(user["id"].encode()).hexdigest())
    out: list[Turn] = []
    for filler_id in ids:
        if filler_id not in filler:
            raise LongmemFormatError(
                f"{where}: user {user['id']} names filler {filler_id!r}, which no filler_*.json beside it has"
            )
        at = start + _dt.timedelta(seconds=round(rng.uniform(0.0, span)))
        session = f"{user['id']}-{filler_id}"
        for n, turn in enumerate(filler[filler_id]["turns"], 1):
            out.append(
                Turn(f"{session}-{n}", turn["role"], turn["text"], session, at + _dt.timedelta(minutes=n - 1))
            )
    return out


def longmem_people(
    folder: str | Path, half: str = "all", *, held_out_only: bool = False, filler_from: Sequence[Path] = ()
) -> list[Person]:
    """The users of ``folder``'s ``users_*.json`` in ``half``, with their filler sessions
    (``filler_*.json`` of ``folder`` and of the folders ``filler_from``) placed in their
    timelines (:func:`place_filler`). With ``held_out_only`` (a set written only to report,
    ``benchmarks/longmem_fresh``) every user is held out: the tuning half is empty."""
    folder = Path(folder)
    filler: dict[str, dict[str, Any]] = {}
    for place in (*filler_from, folder):
        for path in sorted(Path(place).glob("filler_*.json")):
            for session in _load(path).get("sessions", []):
                filler[session["id"]] = session
    people = []
    for path in sorted(folder.glob("users_*.json")):
        for user in _load(path).get("users", []):
            user_half = "heldout" if held_out_only else longmem_half(user["id"])
            if half != "all" and user_half != half:
                continue
            people.append(_longmem_person(user, filler, path.name))
    return people


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise LongmemFormatError(f"{path}: not JSON ({exc}); fix the file or leave it out") from None
    if not isinstance(data, dict):
        raise LongmemFormatError(
            f"{path}: the top level must be an object (see benchmarks/longmem/README.md)"
        )
    return data


def _longmem_person(user: dict[str, Any], filler: dict[str, dict[str, Any]], where: str) -> Person:
    own = [
        Turn(t["id"], t["role"], t["text"], s["id"], _time(s["date"], where) + _dt.timedelta(minutes=n))
        for s in user["sessions"]
        for n, t in enumerate(s["turns"])
    ]
    turns = sorted([*own, *place_filler(user, filler, where)], key=lambda t: t.at)
    known = {t.id for t in own}
    questions = []
    for q in user.get("questions", []):
        if q["kind"] not in LONGMEM_KINDS:
            raise LongmemFormatError(
                f"{where}: question {q['id']} has kind {q['kind']!r}, not one of {LONGMEM_KINDS}"
            )
        missing = [i for i in (*q["evidence"], *q.get("stale", [])) if i not in known]
        if missing:
            raise LongmemFormatError(
                f"{where}: question {q['id']} names turns {missing} its user does not have "
                "(evidence and stale name the user's own turns)"
            )
        questions.append(
            Question(
                q["id"],
                q["kind"],
                q["question"],
                _time(q["asked_at"], where),
                tuple(q["evidence"]),
                tuple(q.get("stale", [])),
            )
        )
    return Person(user["id"], turns, questions)
