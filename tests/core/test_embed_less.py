"""Issue 37: what a captured exchange sends to the full model while calls run.

An answer that restates its user turn takes the turn's vector; a user's turn that recall
already embedded as the call's question is not embedded again. Counted through an embedder
double that records every text the full model is given, with the real Memory and
EmbeddingWorker."""

from __future__ import annotations

import threading

import pytest

import memtap
from memtap.storage.store import InMemoryStore
from memtap.testing.timing import eventually, slack
from memtap.workers import background

GROUPS = [
    {"dog", "beagle", "puppy", "pet", "dogs"},
    {"live", "lives", "home", "tokyo", "city", "moved"},
    {"coffee", "tea", "drink"},
]


def _vector(text: str) -> list[float]:
    words = set(text.lower().replace("?", " ").replace(".", " ").replace("!", " ").split())
    return [float(len(words & g)) for g in GROUPS] + [0.01]


class CountingEmbedder:
    """The full model (``embed``) records each text it is given; ``quick_query`` is the
    cheap path, as good as the full one here."""

    name = "counting-v1"

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def embed(self, texts):
        with self._lock:
            self.texts.extend(texts)
        return [_vector(t) for t in texts]

    def quick_query(self, text):
        return _vector(text)


@pytest.fixture
def calls_running(monkeypatch):
    """An intercepted call is in flight for the whole test (the app is busy)."""
    monkeypatch.setattr(background, "_in_flight", 0)
    background.call_started()
    yield
    background.call_ended()


def _memory(embedder: CountingEmbedder) -> memtap.Memory:
    return memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder)


def test_an_answer_restating_its_turn_takes_the_turns_vector_while_calls_run(calls_running):
    embedder = CountingEmbedder()
    mem = _memory(embedder)
    mem.recall("warm", entity_id="alice")
    turn = "I moved to Tokyo in May with my beagle"
    echo = f"You said: {turn}"
    mem.capture(
        [{"role": "user", "content": turn}], [{"role": "assistant", "content": echo}], entity_id="alice"
    )
    mem.flush()
    engine = mem.longterm.engine
    assert eventually(lambda: engine.stats.vectors_reused >= 1 and engine.stats.vectors_pending == 0, 5)
    assert embedder.texts.count(turn) == 1 and echo not in embedder.texts
    mem.close()


def test_a_turn_the_query_lane_embedded_as_the_question_is_not_embedded_again():
    embedder = CountingEmbedder()
    mem = _memory(embedder)
    engine = mem.longterm.engine
    question = "Which city did my beagle and I move to?"
    assert engine.queries is not None
    engine.queries.vector(question, None)  # the call's question, on the query lane
    assert embedder.texts == [question]
    mem.remember(question, entity_id="alice")
    assert engine.flush(slack(5))
    assert embedder.texts == [question]
    assert engine.stats.vectors_reused >= 1
    mem.close()


def test_a_question_asked_again_takes_the_vector_its_turn_got_from_the_worker():
    embedder = CountingEmbedder()
    mem = _memory(embedder)
    engine = mem.longterm.engine
    turn = "Where does my beagle live now?"
    mem.remember(turn, entity_id="alice")
    assert engine.flush(slack(5))
    assert engine.queries is not None
    engine.queries.vector(turn, None)
    assert embedder.texts == [turn]
    mem.close()


def test_an_answer_goes_to_the_full_model_while_calls_run(monkeypatch):
    """Answers are not held back for a quiet moment: held answers lost their turn's vector
    from the reuse memory and made the flush of a long run twice as slow (issue 37)."""
    monkeypatch.setattr(background, "_in_flight", 0)
    background.call_started()
    try:
        embedder = CountingEmbedder()
        mem = _memory(embedder)
        mem.recall("warm", entity_id="alice")
        answer = "Beagles are great dogs! How is she settling in with the coffee mornings?"
        mem.capture(
            [{"role": "user", "content": "I adopted a beagle last spring"}],
            [{"role": "assistant", "content": answer}],
            entity_id="alice",
        )
        mem.flush()
        # While the call still runs: embedded without waiting for a quiet moment or a flush.
        assert eventually(lambda: answer in embedder.texts, slack(5))
        mem.close()
    finally:
        background.call_ended()
