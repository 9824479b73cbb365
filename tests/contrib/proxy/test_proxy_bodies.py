"""The proxy's body parser: a body that holds the members after the conversation an earlier
one had (whatever its small last members say: a new session's id) is parsed with the kept
segment; whatever the bytes, the result is exactly :func:`json.loads`' (``None`` for what
is not JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtap_proxy.bodies import MIN_TAIL, BodyParser, parse_json

GOLDEN = Path(__file__).parent / "golden"
AGENT_BODIES = [
    "claude_code_first.json",
    "claude_code_continue.json",
    "codex_first.json",
    "codex_resume.json",
]

TOOLS = [
    {"name": f"tool_{i}", "description": "Reads a file — or writes it 🤖 " * 3, "schema": {"system": i}}
    for i in range(40)
]


def agent_body(text: str, **extra) -> bytes:
    messages = [{"role": "user", "content": text}]
    body = {"model": "m", "messages": messages, "system": "You are helpful.", "tools": TOOLS}
    body.update(extra)
    return json.dumps(body).encode()


@pytest.mark.parametrize("name", AGENT_BODIES)
def test_recorded_agent_bodies_parse_as_json_does_and_reuse_their_tail(name):
    raw = (GOLDEN / name).read_bytes()
    parser = BodyParser()
    assert parser.parse(raw) == json.loads(raw)
    assert parser.parse(raw) == json.loads(raw)
    assert (parser.whole, parser.reused) == (1, 1)


#: A recorded body, the session id it names in its last members, and where it says it.
NEW_SESSION_BODIES = [
    ("claude_code_first.json", b"00000000-0000-4000-8000-000000000001"),
    ("codex_first.json", b"00000000-0000-4000-8000-000000000007"),
]


@pytest.mark.parametrize(("name", "session"), NEW_SESSION_BODIES)
def test_a_new_session_of_an_agent_reuses_what_its_earlier_session_kept(name, session):
    # Claude Code names its session in ``metadata`` after ``tools``, Codex in
    # ``prompt_cache_key`` and ``client_metadata``: a new session's first request differs
    # from every earlier body in its last bytes, and must not parse the schemas again.
    raw = (GOLDEN / name).read_bytes()
    assert session in raw[-1024:]
    parser = BodyParser()
    parser.parse(raw)
    for n in range(1, 4):
        new = raw.replace(session, session[:-4] + b"%04d" % n)
        assert parser.parse(new) == json.loads(new)
    assert (parser.whole, parser.reused) == (1, 3)


def test_the_next_turn_of_a_conversation_reuses_the_tail():
    parser = BodyParser()
    parser.parse(agent_body("first question"))
    second = agent_body("first question\\nanswer\\nsecond question")
    assert parser.parse(second) == json.loads(second)
    assert parser.reused == 1


def test_a_reused_tail_is_a_new_top_level_object_each_time():
    parser = BodyParser()
    body = agent_body("hi")
    first, second = parser.parse(body), parser.parse(body)
    assert first == second and first is not second


TAIL = agent_body("x")[agent_body("x").index(b', "system"') :]
HOSTILE_HEADS = [
    b"{",  # no member before the tail: the body is not JSON
    b'{"messages": [1, 2',  # cut inside a nested array
    b'{"messages": "abc',  # cut inside a string
    b'{"messages": {"a": 1',  # cut inside a nested object
    b'{"messages": [], ',  # a trailing comma
    b"[1",  # not an object
    b'{"messages": [], "system": "head wins?"',  # a key in both: the tail's, the last, wins
    b'{"messages": "a\\\\"',  # an escaped backslash closing the string
    b'{"messages": "a\\"',  # an escaped quote: the string goes on into the tail
    b'  {"messages": []}',  # a complete object: the tail then makes it invalid
    b'\xff\xfe{"messages": []',  # not UTF-8
    b'{"messages": [],"model": "m"',
]


@pytest.mark.parametrize("head", HOSTILE_HEADS)
def test_any_head_before_a_kept_tail_parses_as_json_does(head):
    parser = BodyParser()
    parser.parse(agent_body("warm"))  # keeps TAIL
    body = head + TAIL
    assert body.endswith(TAIL)
    assert parser.parse(body) == parse_json(body)


def test_a_tail_whose_first_key_also_occurs_nested_in_it_is_found():
    parser = BodyParser()
    body = agent_body("hi")  # "system" also occurs inside each tool's schema
    parser.parse(body)
    parser.parse(body)
    assert parser.reused == 1


def test_short_bodies_and_bodies_without_a_conversation_are_parsed_whole():
    parser = BodyParser()
    short = json.dumps({"model": "m", "messages": []}).encode()
    no_conversation = json.dumps({"model": "m", "tools": TOOLS}).encode()
    for body in (short, short, no_conversation, no_conversation):
        assert parser.parse(body) == json.loads(body)
    assert parser.reused == 0


def test_kept_tails_are_bounded():
    parser = BodyParser(max_tails=3)
    for i in range(10):
        parser.parse(agent_body("hi", tools=[*TOOLS, {"name": f"tool {i}"}], metadata={"session": i}))
    assert len(parser._tails) == 3
    # Segments that end alike count too: the bound is on what is kept in all.
    parser = BodyParser(max_tails=2)
    for i in range(5):
        parser.parse(agent_body("hi", system=f"You work in project {i}.", metadata={"session": i}))
    assert sum(len(bucket) for bucket in parser._tails.values()) == 2


def test_segments_that_end_alike_are_all_kept():
    # The same tools after different system prompts (two projects of one agent).
    parser = BodyParser()
    bodies = [agent_body("hi", system=f"You work in project {i}.", metadata={"session": i}) for i in range(3)]
    for body in bodies + bodies:
        assert parser.parse(body) == json.loads(body)
    assert (parser.whole, parser.reused) == (3, 3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    conversation=json_values,
    tail_extra=st.dictionaries(
        st.sampled_from(["system", "tools", "metadata", "stream"]), json_values, max_size=3
    ),
    cut=st.integers(min_value=0, max_value=400),
    garbage=st.binary(max_size=8),
)
def test_bodies_sharing_an_earlier_tail_parse_as_json_does(conversation, tail_extra, cut, garbage):
    parser = BodyParser()
    base = {"model": "m", "messages": conversation, "system": "s" * MIN_TAIL, **tail_extra}
    raw = json.dumps(base, ensure_ascii=False).encode()
    assert parser.parse(raw) == json.loads(raw)
    assert parser.parse(raw) == json.loads(raw)
    # Any bytes in front of the same tail: a shorter head, a head with bytes changed.
    tail_start = raw.index(b', "system"')
    for head in (raw[: min(cut, tail_start)], raw[:tail_start] + garbage, garbage + raw[:tail_start]):
        body = head + raw[tail_start:]
        assert parser.parse(body) == parse_json(body)


@settings(max_examples=200, deadline=None)
@given(
    conversation=json_values,
    rest=st.dictionaries(
        st.sampled_from(["metadata", "stream", "tools", "system", "messages"]), json_values, max_size=3
    ),
    other_rest=st.dictionaries(
        st.sampled_from(["metadata", "stream", "tools", "model"]), json_values, min_size=1, max_size=3
    ),
    cut=st.integers(min_value=0, max_value=400),
    garbage=st.binary(max_size=8),
    spaces=st.booleans(),
)
def test_bodies_sharing_an_earlier_segment_with_other_last_members_parse_as_json_does(
    conversation, rest, other_rest, cut, garbage, spaces
):
    parser = BodyParser()
    separators = (", ", ": ") if spaces else (",", ":")
    base = {"model": "m", "messages": conversation, "system": "s" * MIN_TAIL, "tools": TOOLS}
    first = {**base, "metadata": {"session": 1}, **rest}
    raw = json.dumps(first, ensure_ascii=False, separators=separators).encode()
    assert parser.parse(raw) == json.loads(raw)
    # The same segment, then other last members (a key in both wins as in json.loads).
    body = json.dumps({**base, **other_rest}, ensure_ascii=False, separators=separators).encode()
    assert parser.parse(body) == json.loads(body)
    segment_start = body.index(b'"system"') - 1 - (1 if spaces else 0)
    for head in (
        body[: min(cut, segment_start)],
        body[:segment_start] + garbage,
        garbage + body[:segment_start],
    ):
        changed = head + body[segment_start:]
        assert parser.parse(changed) == parse_json(changed)
    for tail in (garbage, b"}" + garbage, b", }", b',"x": 1}}'):
        changed = body[:-1] + tail
        assert parser.parse(changed) == parse_json(changed)
