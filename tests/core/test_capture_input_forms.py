"""``Memory.capture`` takes the messages in the forms an app has them: memtap Messages, the
``{"role", "content"}`` dicts every chat API uses (text parts included), or one text each.
Anything else is refused at once with an error that says what to give, and nothing is
stored (it used to fail deep inside redaction with an AttributeError)."""

from __future__ import annotations

import pytest

import memtap
from memtap.protocol.model import Message
from memtap.storage.store import InMemoryStore


# Own mem: the spool on (captured turns go through the journal as shipped).
@pytest.fixture
def mem():
    m = memtap.Memory(InMemoryStore(), entry_points=False, embedder=None)
    yield m
    m.close()


FORMS = {
    "messages": ([Message("user", "I live in Tokyo.")], [Message("assistant", "Noted.")]),
    "dicts": (
        [{"role": "user", "content": "I live in Tokyo."}],
        [{"role": "assistant", "content": "Noted."}],
    ),
    "text parts": (
        [{"role": "user", "content": [{"type": "text", "text": "I live in Tokyo."}]}],
        [{"role": "assistant", "content": [{"type": "text", "text": "Noted."}]}],
    ),
    "texts": ("I live in Tokyo.", "Noted."),
    "one dict each": (
        {"role": "user", "content": "I live in Tokyo."},
        {"role": "assistant", "content": "Noted."},
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_stores_the_same_turn(mem, form):
    given_input, given_output = FORMS[form]
    mem.capture(given_input, given_output, entity_id="alice", session_id="s1")
    assert [(m.role, m.content) for m in mem.history("s1", entity_id="alice")] == [
        ("user", "I live in Tokyo."),
        ("assistant", "Noted."),
    ]


BAD = {
    "a number": (42, "must be a list"),
    "a list of numbers": ([42], "where a message was expected"),
    "no role": ([{"content": "hi"}], "role None"),
    "an unknown role": ([{"role": "human", "content": "hi"}], "role 'human'"),
    "content that is not text": (
        [{"role": "user", "content": 3.5}],
        "content must be a string or a list of parts, not float",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_refused_with_what_to_give_and_nothing_is_stored(mem, case):
    value, fragment = BAD[case]
    with pytest.raises(TypeError) as caught:
        mem.capture(value, "ok", entity_id="alice", session_id="s1")
    message = str(caught.value)
    assert "capture(input=...)" in message
    assert fragment in message or "takes a list of messages" in message
    assert mem.history("s1", entity_id="alice") == []
