"""Reading a transcript file into turns (memtap.cli.transcript): the shapes accepted, the bad
lines refused, and how messages pair into turns."""

from __future__ import annotations

import datetime as _dt
import json

import pytest

from memtap.cli.transcript import TranscriptError, read_transcript, turns_of
from memtap.protocol.model import Message

UTC = _dt.timezone.utc
MAY_8 = _dt.datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def lines(*records) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in records]


@pytest.mark.parametrize(
    "when",
    [
        {"at": "2023-05-08T13:56:00Z"},
        {"at": "2023-05-08T15:56:00+02:00"},
        {"at": "2023-05-08T13:56:00"},  # no zone: UTC
        {"at": "2023-05-08 13:56:00"},
        {"timestamp": 1683554160},
        {"timestamp": 1683554160.0},
        {"timestamp": 1683554160000},  # milliseconds
        {"created_at": "2023-05-08T13:56:00.000Z"},
    ],
)
def test_times_in_every_accepted_shape(when):
    (message,) = read_transcript(lines({"role": "user", "content": "hi", **when}))
    assert message.at == MAY_8


def test_content_parts_and_sessions():
    messages = read_transcript(
        lines(
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}], "at": 0},
            {"role": "assistant", "content": None, "at": 1, "session_id": "s2"},
            {"role": "system", "content": "be brief", "at": 2, "session": "s3"},
        )
    )
    assert [(m.content, m.session_id, m.line) for m in messages] == [
        ("look\n[image_url]", None, 1),
        ("", "s2", 2),
        ("be brief", "s3", 3),
    ]


def test_every_bad_line_is_named_and_nothing_is_read():
    with pytest.raises(TranscriptError) as caught:
        read_transcript(
            lines(
                {"role": "user", "content": "fine", "at": 0},
                {"role": "narrator", "content": "x", "at": 0},
                {"role": "user", "content": "no time"},
                "",  # blank lines are skipped
                "not json",
                [1, 2],
                {"role": "user", "content": 5, "at": 0},
                {"role": "user", "content": "x", "at": "yesterday"},
                {"role": "user", "content": "x", "at": True},
                {"role": "user", "content": "x", "at": 1e300},
                {"role": "user", "content": "x", "at": 0, "session_id": 7},
            ),
            "talk.jsonl",
        )
    problems = dict(caught.value.problems)
    assert sorted(problems) == [2, 3, 5, 6, 7, 8, 9, 10, 11]
    assert "role 'narrator' is not one of" in problems[2]
    assert "no time" in problems[3]
    assert problems[5].startswith("not JSON")
    assert "JSON object" in problems[6]
    assert "content must be" in problems[7]
    assert "ISO 8601" in problems[8]
    assert "session_id" in problems[11]
    assert str(caught.value) == "talk.jsonl: 9 line(s) cannot be read; nothing was imported"


def said(*pairs) -> tuple[Message, ...]:
    return tuple(Message(role, text) for role, text in pairs)


def test_messages_pair_into_turns_per_session_in_file_order():
    messages = read_transcript(
        lines(
            {"role": "assistant", "content": "Hello! How can I help?", "at": 10},  # an opening
            {"role": "system", "content": "be brief", "at": 20},
            {"role": "user", "content": "I adopted a beagle", "at": 21},
            {"role": "user", "content": "called Mochi", "at": 22, "session_id": "other"},
            {"role": "assistant", "content": "Lovely!", "at": 23},
            {"role": "assistant", "content": "Tell me more.", "at": 24},
            {"role": "tool", "content": "weather: sunny", "at": 25},
            {"role": "user", "content": "what now?", "at": 26},  # no answer: a turn without one
        )
    )
    turns = turns_of(messages, "main")
    assert [(t.session_id, t.at.timestamp(), t.input, t.output) for t in turns] == [
        ("main", 10, (), said(("assistant", "Hello! How can I help?"))),
        (
            "main",
            20,
            said(("system", "be brief"), ("user", "I adopted a beagle")),
            said(("assistant", "Lovely!"), ("assistant", "Tell me more.")),
        ),
        ("other", 22, said(("user", "called Mochi")), ()),
        ("main", 25, said(("tool", "weather: sunny"), ("user", "what now?")), ()),
    ]
