"""Ranking with the real MiniLM through the SHIPPED defaults (issue 34): one weak shared
word does not outvote meaning, the user's words come before the assistant's echo, the
newer of two statements about the same thing ranks first. No test here sets a Fusion: a
change of a shipped weight that loses these cases fails them."""

from __future__ import annotations

import datetime as _dt

import pytest

import memtap
import memtap_minilm
from memtap.protocol.model import Message
from memtap.storage.store import InMemoryStore

T0 = _dt.datetime(2025, 1, 6, 9, tzinfo=_dt.timezone.utc)

#: Facts of one user that answer none of the questions below (the haystack).
BACKGROUND = [
    "My brother Tom plays the cello in an orchestra.",
    "I usually cycle to the office when it is not raining.",
    "We are repainting the kitchen a pale green.",
    "My laptop is a ThinkPad I bought second-hand.",
    "I'm reading a biography of Ada Lovelace.",
    "Our neighbours have three noisy chickens.",
    "I run five kilometres on Sunday mornings.",
    "My grandmother was born in Galway.",
]


#: (question, the fact that answers it in other words, a fact sharing one weak word with
#: the question and answering nothing).
def _known_loss(reason: str) -> pytest.MarkDecorator:
    """A case the shipped ranking still loses (issue 34, reported): strict, so that the day
    it is won the mark must go."""
    return pytest.mark.xfail(strict=True, reason=reason)


WEAK_WORD = [
    ("What pet do I have?", "We adopted a kitten called Miso.", "I have to renew my passport."),
    (
        "What instrument am I learning?",
        "I've been taking piano lessons since May.",
        "I'm learning to be patient with the builders.",
    ),
    pytest.param(
        "Where's home for me these days?",
        "I moved to Lisbon in March.",
        "It was a lovely day at the beach.",
        marks=_known_loss("a question about now boosts the newer trap's one-word match (present_boost)"),
    ),
    pytest.param(
        "Which sport do I follow?",
        "I never miss a Liverpool match on TV.",
        "I follow a strict budget now.",
        marks=_known_loss("the verb shared with a two-term question covers half its IDF mass"),
    ),
    pytest.param(
        "What do I drink in the morning?",
        "I start with a double espresso.",
        "The morning train was late again.",
        marks=_known_loss("the shared word is the question's content word, not a weak one"),
    ),
    pytest.param(
        "What am I allergic to?",
        "Peanuts make my throat swell up.",
        "My colleague is allergic to cats.",
        marks=_known_loss("a near miss in words and meaning: the trap says 'allergic'"),
    ),
]


def _memory() -> memtap.Memory:
    return memtap.Memory(InMemoryStore(), entry_points=False, plugins=[memtap_minilm])


@pytest.fixture(scope="module")
def weak_word_memory():
    mem = _memory()
    cases = [case.values if hasattr(case, "values") else case for case in WEAK_WORD]
    texts = BACKGROUND + [t for _, answer, trap in cases for t in (answer, trap)]
    for i, text in enumerate(texts):
        mem.remember(text, entity_id="u", at=T0 + _dt.timedelta(hours=i))
    yield mem
    mem.close()


@pytest.mark.parametrize(("question", "answer", "trap"), WEAK_WORD)
def test_one_weak_shared_word_does_not_outrank_the_meaning(weak_word_memory, question, answer, trap):
    found = [s.text for s in weak_word_memory.recall(question, entity_id="u", k=10)]
    assert answer in found, found
    assert trap not in found or found.index(answer) < found.index(trap), found


def _capture(mem: memtap.Memory, said: str, reply: str, at: _dt.datetime, session: str) -> None:
    mem.capture(
        [Message("user", said)], [Message("assistant", reply)], entity_id="u", session_id=session, at=at
    )


#: (what the user said, the assistant's echo of it, a question about it).
ECHOES = [
    (
        "We adopted a kitten last weekend, she's a tabby and we named her Miso.",
        "Congratulations on Miso! A cat called Miso is adorable.",
        "What's my cat called?",
    ),
    (
        "I signed up to run 42 km through Berlin this September.",
        "Good luck with your marathon training for the race in Berlin!",
        "Which marathon race am I training for?",
    ),
    (
        "Ella got her place at Leeds, she's starting her degree next week.",
        "How exciting that your daughter will study at the university in Leeds!",
        "Where does my daughter study at university?",
    ),
    (
        "Peanuts make my throat swell up, I carry an EpiPen.",
        "That sounds like a serious allergy; always check food labels for peanuts.",
        "What food allergy do I have?",
    ),
]


@pytest.mark.parametrize(("said", "echo", "question"), ECHOES, ids=[q for _, _, q in ECHOES])
def test_an_assistant_echo_does_not_outrank_the_users_statement(said, echo, question):
    mem = _memory()
    for i, text in enumerate(BACKGROUND):
        mem.remember(text, entity_id="u", at=T0 + _dt.timedelta(hours=i))
    _capture(mem, said, echo, T0 + _dt.timedelta(days=2), "s1")
    mem.flush(60)
    found = [s.text for s in mem.recall(question, entity_id="u", k=5)]
    mem.close()
    assert said in found and (echo not in found or found.index(said) < found.index(echo)), found


#: (what the user asked, what the assistant recommended, a question about that).
ADVICE = [
    (
        "Can you suggest a book for my flight?",
        "I'd recommend 'Piranesi' by Susanna Clarke.",
        "What book did you recommend?",
    ),
    (
        "What should I cook for eight guests?",
        "A big tray of vegetable lasagne would work well.",
        "What was the recipe you gave me?",
    ),
]


@pytest.mark.parametrize(("asked", "advice", "question"), ADVICE, ids=[q for _, _, q in ADVICE])
def test_what_the_assistant_said_is_found_when_asked(asked, advice, question):
    mem = _memory()
    for i, text in enumerate(BACKGROUND):
        mem.remember(text, entity_id="u", at=T0 + _dt.timedelta(hours=i))
    _capture(mem, asked, advice, T0 + _dt.timedelta(days=2), "s1")
    mem.flush(60)
    found = [s.text for s in mem.recall(question, entity_id="u", k=3)]
    mem.close()
    assert advice in found, found


#: (the old statement, the new one, the question about the current state).
UPDATES = [
    (
        "I'm a primary school teacher, I love my work.",
        "I started work as a quantity surveyor this week.",
        "What do I do for work now?",
    ),
    ("I live in a flat in Manchester.", "We just moved into a house in Bristol.", "Where do I live now?"),
    (
        "My car is an old blue Fiat Panda.",
        "I sold the Panda and bought a Tesla Model 3.",
        "What car do I drive these days?",
    ),
    (
        "I'm vegetarian, no meat at all.",
        "I've gone fully vegan since the spring.",
        "What diet do I follow now?",
    ),
]


@pytest.mark.parametrize(("old", "new", "question"), UPDATES, ids=[q for _, _, q in UPDATES])
def test_the_newer_statement_ranks_first(old, new, question):
    mem = _memory()
    for i, text in enumerate(BACKGROUND):
        mem.remember(text, entity_id="u", at=T0 + _dt.timedelta(hours=i))
    _capture(
        mem,
        old,
        "That sounds great, tell me more about your work and life!",
        T0 + _dt.timedelta(days=3),
        "s1",
    )
    _capture(mem, new, "Congratulations on the change!", T0 + _dt.timedelta(days=90), "s2")
    mem.flush(60)
    found = [s.text for s in mem.recall(question, entity_id="u", k=5)]
    mem.close()
    assert new in found and (old not in found or found.index(new) < found.index(old)), found


#: Two people talking, paired by position as LOCOMO's conversations are captured (the first
#: speaker as "user", the second as "assistant"): (the first speaker's turn, the second's
#: answer, which says something of its own, a question the second's turn answers).
TWO_SPEAKERS = [
    (
        "Caroline: I went to a support group meeting yesterday, it was really moving.",
        "Melanie: That's great! I finally painted the sunset over the lake last weekend.",
        "What did Melanie paint last weekend?",
    ),
    (
        "Jon: I lost my job at the bank last month, so I'm thinking about what comes next.",
        "Gina: Sorry to hear that. I just opened my own clothing store downtown.",
        "What kind of store did Gina open?",
    ),
    (
        "Tim: I've been reading a lot of fantasy novels this winter.",
        "John: Nice. I joined a basketball team in Seattle and we train three times a week.",
        "Which team did John join?",
    ),
    (
        "Maria: My shift at the homeless shelter ran late again tonight.",
        "Audrey: I adopted two puppies, Pepper and Panda, from the local rescue.",
        "What are the names of Audrey's puppies?",
    ),
]


@pytest.mark.parametrize(("first", "second", "question"), TWO_SPEAKERS, ids=[q for _, _, q in TWO_SPEAKERS])
def test_a_second_speaker_who_does_not_echo_keeps_their_place(first, second, question):
    """The user-first rule is for the model's echo of what the user said; a second person
    saying something of their own (LOCOMO's pairs) is not pushed below the first."""
    mem = _memory()
    for i, text in enumerate(BACKGROUND):
        mem.remember(text, entity_id="u", at=T0 + _dt.timedelta(hours=i))
    _capture(mem, first, second, T0 + _dt.timedelta(days=2), "s1")
    mem.flush(60)
    found = [s.text for s in mem.recall(question, entity_id="u", k=5)]
    mem.close()
    assert found and found[0] == second, found
