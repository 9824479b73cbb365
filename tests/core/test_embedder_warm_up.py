"""Loading the embedder's model is never on the request path: the first recall of a
process starts it in the background and answers with words (and the embedder's quick
vectors, once it has them) until the model is ready; registering a client starts it early;
closing the Memory waits for it (a model still loading at interpreter exit can abort the
process)."""

from __future__ import annotations

import threading

import pytest

import memtap
from memtap.longterm.recall_injector import RecallBudget
from memtap.storage.store import InMemoryStore
from memtap.testing.timing import slack

GROUPS = [{"dog", "beagle", "puppy", "pet"}, {"work", "job", "engineer"}]


class LoadingEmbedder:
    """An embedder whose model takes as long to load as the test says (``gate``): like
    MiniLM, ``embed`` loads it first when needed; ``warm_up`` loads it and nothing else."""

    name = "loading-v1"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.loaded = threading.Event()
        self.load_threads: list[str] = []
        self.embedded: list[str] = []
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        with self._lock:
            if self.loaded.is_set():
                return
            self.load_threads.append(threading.current_thread().name)
            self.gate.wait(10)
            self.loaded.set()

    def embed(self, texts):
        self.warm_up()
        self.embedded.extend(texts)
        return [
            [float(len(set(t.lower().replace("?", "").split()) & g)) for g in GROUPS] + [0.01] for t in texts
        ]

    def quick_query(self, text):
        if not self.loaded.is_set():
            return None  # never loads in the caller's thread
        return self.embed([text])[0]


@pytest.fixture
def emb():
    e = LoadingEmbedder()
    yield e
    e.gate.set()


def memory(emb, **kw):
    return memtap.Memory(InMemoryStore(), entry_points=False, embedder=emb, **kw)


def warm_index(mem, entity):
    """Load the entity's index (as the first call of a process does in the background)."""
    assert mem.longterm.engine.indexes.get(entity, wait=True) is not None


def test_request_path_recall_answers_by_words_while_the_model_loads(emb):
    mem = memory(emb, recall=RecallBudget(deadline=5.0))
    mem.longterm.store.add_facts([memtap.Fact(entity_id="alice", text="I adopted a beagle")])
    warm_index(mem, "alice")
    caller = threading.current_thread().name
    hits = mem.recall("the beagle", entity_id="alice", deadline=5.0)
    assert [h.text for h in hits] == ["I adopted a beagle"]
    stats = mem.longterm.engine.stats
    # Not waited for (a 5 s deadline would have been spent on a model load), not timed out:
    # the model is still loading, in another thread, started by this search.
    assert (stats.model_loading, stats.embed_timeouts, stats.lexical_only) == (1, 0, 1)
    assert "the beagle" not in emb.embedded
    emb.gate.set()
    assert mem.longterm.engine.queries.warm_up(wait=True, timeout=5)
    assert emb.load_threads and caller not in emb.load_threads
    # The fact's own vector is made in the background once the model is there (a recall
    # with a deadline serves what the index has meanwhile: by words alone it finds nothing).
    assert mem.longterm.engine.flush(slack(5))
    # Once loaded, the query vector bridges meaning again.
    assert [h.text for h in mem.recall("what pet do I have?", entity_id="alice", deadline=5.0)] == [
        "I adopted a beagle"
    ]
    assert stats.model_loading == 1
    mem.close()


def test_recall_without_a_deadline_waits_for_the_model(emb):
    mem = memory(emb)
    mem.remember("I adopted a beagle", entity_id="alice")
    mem.remember("I work as an engineer", entity_id="alice")
    threading.Timer(0.05, emb.gate.set).start()
    assert [h.text for h in mem.recall("what pet do I have?", entity_id="alice", k=1)] == [
        "I adopted a beagle"
    ]
    assert "what pet do I have?" in emb.embedded
    mem.close()


def test_the_warm_up_starts_once_and_close_waits_for_it(emb):
    mem = memory(emb)
    queries = mem.longterm.engine.queries
    assert queries.warm_up() is False
    assert queries.warm_up() is False  # still loading: not started twice
    closer = threading.Thread(target=mem.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # waits for the load rather than leave it running at exit
    emb.gate.set()
    closer.join(5)
    assert not closer.is_alive()
    assert emb.load_threads == ["memtap-embedder-warm-up"]


def test_an_embedder_without_warm_up_is_ready_at_once():
    class Plain:
        name = "plain-v1"

        def embed(self, texts):
            return [[1.0, 0.0] for _ in texts]

    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=Plain())
    assert mem.longterm.engine.queries.warm_up() is True
    mem.close()


def test_a_failing_warm_up_is_logged_and_recall_keeps_to_words(caplog):
    class Broken(LoadingEmbedder):
        def warm_up(self) -> None:
            raise RuntimeError("model file missing")

    emb = Broken()
    mem = memory(emb)
    mem.longterm.store.add_facts([memtap.Fact(entity_id="alice", text="I adopted a beagle")])
    warm_index(mem, "alice")
    assert mem.longterm.engine.queries.warm_up(wait=True, timeout=5) is False
    assert [h.text for h in mem.recall("beagle", entity_id="alice", deadline=0.5)] == ["I adopted a beagle"]
    assert "model file missing" in caplog.text
    mem.close()


def test_loading_waits_for_the_calls_in_flight():
    """A warm-up step waits (bounded) for the app's calls to finish, and for a moment
    without a new one, so that its GIL-heavy work does not stall them."""
    from memtap.workers.background import call_ended, call_started, calls_in_flight, wait_for_quiet

    assert calls_in_flight() == 0
    assert wait_for_quiet(0.5)
    call_started()
    try:
        assert wait_for_quiet(0.05) is False  # busy: gives up after the timeout
        threading.Timer(0.05, call_ended).start()
        assert wait_for_quiet(2.0) is True  # quiet once the call ended
    finally:
        if calls_in_flight():
            call_ended()
    # A call that starts during the settle time restarts the wait.
    threading.Timer(0.05, lambda: (call_started(), call_ended())).start()
    started = threading.Event()
    result = []

    def waiter():
        started.set()
        result.append(wait_for_quiet(2.0, settle=0.2))

    t = threading.Thread(target=waiter)
    t.start()
    t.join(3)
    assert result == [True]


def test_every_call_is_counted_in_flight_until_it_ends(emb):
    from memtap.protocol.model import Attribution
    from memtap.request.tap import Call
    from memtap.workers.background import calls_in_flight

    mem = memory(emb)
    emb.gate.set()
    before = calls_in_flight()

    class Proto:
        name = provider = operation = "test"

    call = Call(mem.tap, Proto(), Attribution(entity_id="a", session_id="s"), None)
    assert calls_in_flight() == before + 1
    call.failed(RuntimeError("x"))
    call.failed(RuntimeError("twice"))  # only the first report counts
    assert calls_in_flight() == before
    mem.close()
