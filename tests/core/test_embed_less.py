"""Issue 37: what a captured exchange sends to the full model while calls run.

The model's answers keep their quick vector (or take their user turn's) until the process is
quiet or flushed; a user's turn that recall already embedded as the call's question is not
embedded again. Counted through an embedder double that records every text the full model
is given, with the real Memory and EmbeddingWorker."""

from __future__ import annotations

import threading

import pytest

import memtap
from memtap.longterm.recall import EmbeddingWorker, RecallStats
from memtap.protocol.model import Fact
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
    """An intercepted call is in flight for the whole test (the app is busy), with answers
    held while calls run (``EmbeddingWorker.MAX_HELD``: none by default)."""
    monkeypatch.setattr(EmbeddingWorker, "MAX_HELD", 2048)
    monkeypatch.setattr(background, "_in_flight", 0)
    background.call_started()
    yield
    background.call_ended()


def _memory(embedder: CountingEmbedder) -> memtap.Memory:
    return memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder)


def test_an_answer_is_not_sent_to_the_full_model_while_calls_run_and_is_by_flush(calls_running):
    embedder = CountingEmbedder()
    mem = _memory(embedder)
    mem.recall("warm", entity_id="alice")  # the index is loaded: vectors go to it
    turn = "I adopted a beagle last spring"
    answer = "Beagles are great dogs! How is she settling in with the coffee mornings?"
    mem.capture(
        [{"role": "user", "content": turn}], [{"role": "assistant", "content": answer}], entity_id="alice"
    )
    mem.flush()
    engine = mem.longterm.engine
    assert eventually(lambda: turn in embedder.texts, 5)
    assert engine.worker is not None
    engine.worker._pending.wait(slack(1), most=1)  # all but one fact done (before: all)
    assert answer not in embedder.texts
    assert engine.stats.answers_held == 1
    # Findable by meaning all the same (its quick vector).
    hits = mem.recall("coffee mornings", entity_id="alice", k=5)
    assert any(h.fact.text == answer for h in hits)
    assert engine.flush(slack(5))
    assert answer in embedder.texts
    assert engine.stats.answers_held == 0
    mem.close()


def test_held_answers_are_embedded_once_the_process_is_quiet(monkeypatch, calls_running):
    monkeypatch.setattr(EmbeddingWorker, "QUIET_AFTER", 0.0)
    embedder = CountingEmbedder()
    mem = _memory(embedder)
    mem.recall("warm", entity_id="alice")
    answer = "Tea is a fine drink for a city morning."
    mem.capture(
        [{"role": "user", "content": "I moved to Tokyo"}],
        [{"role": "assistant", "content": answer}],
        entity_id="alice",
    )
    mem.flush()
    engine = mem.longterm.engine
    assert engine.worker is not None
    assert eventually(lambda: engine.worker._pending.count == 1 and "I moved to Tokyo" in embedder.texts, 5)
    assert answer not in embedder.texts
    background.call_ended()  # the call ends: quiet from now on
    try:
        assert eventually(lambda: answer in embedder.texts, 5)
    finally:
        background.call_started()  # the fixture ends it
    mem.close()


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


def test_an_answer_queued_twice_while_held_does_not_keep_flush_waiting(calls_running):
    """A reloaded index queues again the facts without a full vector, held answers too."""
    embedder = CountingEmbedder()
    stats = RecallStats()
    worker = EmbeddingWorker(embedder, InMemoryStore(), lambda entity, vectors, quick: None, stats)
    answer = Fact(
        entity_id="alice",
        text="Tea is a fine drink.",
        source_exchange_id="x1",
        metadata={"role": "assistant"},
    )
    worker.submit([answer])
    assert eventually(lambda: stats.answers_held == 1, 5)
    worker.submit([answer])
    assert eventually(lambda: worker._queue.empty(), 5)
    assert worker.flush(slack(5))
    assert embedder.texts == ["Tea is a fine drink."]
    worker.close()


def test_an_echo_held_while_the_quick_table_was_not_ready_still_takes_its_turns_vector(calls_running):
    """Under load the quick table can be late: facts then arrive without quick vectors, and
    reuse (which compares them) must not send every echo to the full model at the flush."""
    embedder = CountingEmbedder()
    ready = threading.Event()
    gate = threading.Event()
    full = embedder.embed

    def quick(text):
        return _vector(text) if ready.is_set() else None

    def embed(texts):
        gate.wait(slack(5))
        return full(texts)

    embedder.embed = embed  # type: ignore[method-assign]
    stats = RecallStats()
    worker = EmbeddingWorker(
        embedder, InMemoryStore(), lambda entity, vectors, quick: None, stats, quick=quick
    )
    turn = Fact(entity_id="alice", text="I moved to Tokyo with my beagle", source_exchange_id="x1")
    echo = Fact(
        entity_id="alice",
        text="You said: I moved to Tokyo with my beagle",
        source_exchange_id="x1",
        metadata={"role": "assistant"},
    )
    worker.submit([turn, echo])
    assert eventually(lambda: stats.answers_held == 1, 5)
    ready.set()  # the table is loaded now
    gate.set()
    assert eventually(lambda: worker.pending == 0, 5)
    assert embedder.texts == [turn.text]
    worker.close()


def test_past_the_most_answers_held_the_oldest_go_to_the_model_while_calls_run(monkeypatch, calls_running):
    monkeypatch.setattr(EmbeddingWorker, "MAX_HELD", 2)  # after calls_running's
    embedder = CountingEmbedder()
    stats = RecallStats()
    worker = EmbeddingWorker(embedder, InMemoryStore(), lambda entity, vectors, quick: None, stats)
    answers = [
        Fact(
            entity_id="alice",
            text=f"Answer {i} about tea.",
            source_exchange_id=f"x{i}",
            metadata={"role": "assistant"},
        )
        for i in range(3)
    ]
    for answer in answers:
        worker.submit([answer])
        assert eventually(lambda: worker._queue.empty(), 5)
    assert eventually(lambda: embedder.texts == ["Answer 0 about tea."], 5)
    assert stats.answers_held == 2
    worker.close()


def test_by_default_an_answer_goes_to_the_full_model_while_calls_run(monkeypatch):
    """No answer is held by default (``MAX_HELD`` 0): held answers lost their turn's
    vector from the reuse memory and made the flush of a long run twice as slow."""
    assert EmbeddingWorker.MAX_HELD == 0
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
        assert mem.longterm.engine.stats.answers_held == 0
        mem.close()
    finally:
        background.call_ended()
