"""The incremental SSE parser: every byte accounted for, events whatever the reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memtap_proxy.sse import SSEEvent, SSEParser


def parse(pieces: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events = [e for p in pieces for e in parser.feed(p)]
    return events + parser.close()


def data(events: list[SSEEvent]) -> list[str]:
    return [e.data for e in events if e.data is not None]


def test_done_split_across_reads() -> None:
    events = parse([b'data: {"a":1}\n\ndata: [DO', b"NE]\n", b"\n"])
    assert data(events) == ['{"a":1}', "[DONE]"]


def test_crlf_cr_and_no_space() -> None:
    events = parse([b"event: x\r\ndata:{}\r\n\r\ndata:  two\r", b"\n\r\ndata: three\r\r"])
    assert data(events) == ["{}", " two", "three"]
    assert events[0].event == "x"


def test_cr_at_end_of_read_waits_for_a_possible_lf() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert data(parser.feed(b"\n\r\n")) == ["a"]


def test_multiline_data_and_comments() -> None:
    events = parse([b": keep-alive\n\ndata: line1\ndata: line2\nid: 7\nretry: 5\n\n"])
    assert data(events) == ["line1\nline2"]
    assert events[0].raw == b": keep-alive\n\n"


def test_eof_without_done_or_blank_line() -> None:
    events = parse([b'data: {"x":1}\n\ndata: {"y":2}'])
    assert data(events) == ['{"x":1}', '{"y":2}']


events_st = st.lists(
    st.tuples(
        st.sampled_from([None, "message_start", "ping"]),
        st.lists(
            st.text(
                alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=10
            ),
            min_size=1,
            max_size=3,
        ),
        st.sampled_from([b"\n", b"\r\n", b"\r"]),
        st.booleans(),
    ),
    max_size=6,
)


@given(events=events_st, cuts=st.lists(st.integers(0, 400), max_size=10))
def test_any_reads_give_the_same_events_and_every_byte(events, cuts) -> None:
    stream = b""
    expected = []
    for name, lines, eol, space in events:
        sep = b": " if space else b":"
        block = (b"event" + sep + name.encode() + eol) if name else b""
        block += b"".join(b"data" + sep + line.encode() + eol for line in lines)
        stream += block + eol
        stripped = [line[1:] if not space and line.startswith(" ") else line for line in lines]
        expected.append("\n".join(stripped))
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)])]
    got = parse(pieces)
    assert b"".join(e.raw for e in got) == stream
    assert data(got) == expected
