"""The recall injector's relevance gate with the real MiniLM and the SHIPPED defaults
(issue 34): a question whose answer was never said injects nothing, while the answer,
once said, is injected."""

from __future__ import annotations

import datetime as _dt

import pytest

import memtap
import memtap_minilm
from memtap.protocol.model import Attribution, Message
from memtap.protocol.wire import InjectionRequest, RequestView
from memtap.storage.store import InMemoryStore

T0 = _dt.datetime(2025, 1, 6, 9, tzinfo=_dt.timezone.utc)

BACKGROUND = [
    "My brother Tom plays the cello in an orchestra.",
    "I usually cycle to the office when it is not raining.",
    "We are repainting the kitchen a pale green.",
    "I run five kilometres on Sunday mornings.",
]


class Proto:
    name = "test.chat"
    provider = "test"
    operation = "chat"


def inject(mem: memtap.Memory, text: str) -> str:
    """The memory block the recall injector gives a call asking ``text`` ("" for none)."""
    request = InjectionRequest(
        attribution=Attribution(entity_id="u", session_id="new"),
        protocol=Proto(),  # type: ignore[arg-type]
        request=RequestView(messages=[Message("user", text)]),
    )
    blocks = mem.pm.get_plugin("recall").memtap_request_injections(request)
    return "\n".join(b.text for b in blocks)


def _memory(facts: list[str]) -> memtap.Memory:
    mem = memtap.Memory(InMemoryStore(), entry_points=False, plugins=[memtap_minilm])
    for i, text in enumerate(BACKGROUND + facts):
        mem.remember(text, entity_id="u", at=T0 + _dt.timedelta(hours=i))
    mem.longterm.engine.queries.warm_up(wait=True)
    mem.recall("warm up", entity_id="u")  # loaded and embedded: the injector's deadline is met
    return mem


#: (a question asking for a name, a near miss naming no one, the answer).
NAMES = [
    ("What's my dentist's name?", "My husband is a dentist.", "My dentist is Dr. Patel on Mill Road."),
    ("What is my cat called?", "I've always wanted a cat.", "Our cat is called Biscuit."),
    (
        "What's the name of my manager?",
        "My manager is strict about deadlines.",
        "My manager Sandra approved my leave.",
    ),
    # A near miss naming the one the question names (Zosia) and someone else (Kasia),
    # never the boyfriend: the answer-kind check alone let it through (issue 34).
    (
        "What's Zosia's boyfriend called?",
        "Zosia is staying at her mum's with Kasia this weekend.",
        "Zosia's boyfriend Kacper came round for dinner.",
    ),
]


@pytest.mark.parametrize(("question", "near_miss", "answer"), NAMES, ids=[q for q, _, _ in NAMES])
def test_a_name_never_said_injects_nothing_and_a_name_said_is_injected(question, near_miss, answer):
    mem = _memory([near_miss])
    assert inject(mem, question) == ""
    mem.close()
    mem = _memory([near_miss, answer])
    block = inject(mem, question)
    mem.close()
    assert answer in block and near_miss not in block
