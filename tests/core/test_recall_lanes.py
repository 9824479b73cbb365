"""Recall under load (issue 37): a call never waits behind the full model by default, the
query lane never makes a queue, documents wait for queries, and a fact is findable by
meaning (a quick vector) before the full model has embedded it."""

from __future__ import annotations

import threading
import time

import attrs
import pytest

import memtap
from memtap.longterm.recall import EmbeddingWorker, QueryVectors, RecallStats
from memtap.longterm.recall_injector import RecallBudget
from memtap.protocol.model import Attribution, Fact, Message
from memtap.protocol.wire import InjectionRequest, RequestView
from memtap.storage.store import InMemoryStore
from memtap.testing.timing import eventually, slack, wait_for

# A tiny meaning space: words of one group share a dimension.
GROUPS = [
    {"dog", "beagle", "puppy", "pet"},
    {"live", "lives", "home", "tokyo", "city"},
    {"coffee", "tea", "drink"},
]


def _vector(text: str) -> list[float]:
    words = set(text.lower().replace("?", " ").replace(".", " ").split())
    return [float(len(words & g)) for g in GROUPS] + [0.01]


class LaneEmbedder:
    """The full model: the group vector after ``delay`` seconds (``gate``: not before the
    event is set). ``quick``: a quick path, as good as the full one (``"blind"``: a
    constant vector, no meaning at all)."""

    name = "lanes-v1"

    def __init__(self, delay: float = 0.0, quick: str | None = None) -> None:
        self.delay = delay
        self.gate: threading.Event | None = None
        self.texts: list[str] = []
        self._quick_kind = quick
        if quick is not None:
            self.quick_query = self._quick_query

    def embed(self, texts):
        if self.gate is not None:
            self.gate.wait(10)
        if self.delay:
            time.sleep(self.delay)
        self.texts.extend(texts)
        return [_vector(t) for t in texts]

    def _quick_query(self, text):
        return [0.0, 0.0, 0.0, 1.0] if self._quick_kind == "blind" else _vector(text)


class Proto:
    name = "test"


def inject(mem: memtap.Memory, text: str) -> list:
    request = InjectionRequest(
        attribution=Attribution(entity_id="alice", session_id="s9"),
        protocol=Proto(),  # type: ignore[arg-type]
        request=RequestView(messages=[Message("user", text)]),
    )
    return mem.pm.get_plugin("recall").memtap_request_injections(request)


def wait_cached(lane: QueryVectors, question: str, timeout: float = 5.0) -> None:
    """Until the lane has made ``question``'s vector (the assertions after it say whether)."""
    eventually(lambda: lane.cached(question) is not None, timeout)


def lane_idle(lane: QueryVectors) -> None:
    """Until every query the lane had queued has run or been dropped (its one worker takes
    them in order: a job queued now runs after them)."""
    lane._pool.submit(lambda: None).result(slack(10))


def memory(embedder, **kw) -> memtap.Memory:
    return memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder, **kw)


def test_a_call_that_may_not_wait_for_the_full_model_does_not_and_the_next_one_uses_it():
    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(model_wait=0.0))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")  # index loaded, fact embedded (no deadline)
    embedder.delay = slack(0.3)
    stats = mem.longterm.engine.stats
    escalations = stats.escalations
    started = time.perf_counter()
    # No word shared, a quick vector that knows nothing: only the full model finds it.
    assert inject(mem, "which pet do I own?") == []
    assert time.perf_counter() - started < slack(0.2), "the call waited for the full model"
    assert stats.escalations == escalations + 1 and stats.model_deferred == 1
    # The lane made the vector meanwhile: the same question, asked again, has it.
    assert mem.longterm.engine.queries is not None
    wait_cached(mem.longterm.engine.queries, "which pet do I own?")
    (block,) = inject(mem, "which pet do I own?")
    assert "Alice adopted a beagle" in block.text
    mem.close()


def test_a_budget_that_waits_for_the_full_model_gets_its_answer_in_the_same_call():
    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(deadline=2.0, model_wait=2.0))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    (block,) = inject(mem, "which pet do I own?")
    assert "Alice adopted a beagle" in block.text
    assert mem.longterm.engine.stats.model_deferred == 0
    mem.close()


def test_the_query_lane_never_makes_a_queue():
    embedder = LaneEmbedder(delay=0.2)
    lane = QueryVectors(embedder)
    questions = [f"question number {i}" for i in range(10)]
    for q in questions:
        with pytest.raises(TimeoutError):
            lane.vector(q, 0.0)
    wait_cached(lane, questions[-1])
    # The first was being embedded; each later one took the waiting one's place.
    assert embedder.texts == [questions[0], questions[-1]]
    assert lane.cached(questions[-1]) is not None and lane.cached(questions[5]) is None
    lane.close()


def test_a_caller_waiting_for_a_query_that_a_newer_one_replaced_gets_a_timeout():
    embedder = LaneEmbedder()
    embedder.gate = threading.Event()
    lane = QueryVectors(embedder)
    with pytest.raises(TimeoutError):
        lane.vector("running", 0.0)  # holds the lane
    outcome: list[BaseException | None] = []

    def wait_for_second() -> None:
        try:
            lane.vector("second", 5.0)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_second)
    waiter.start()
    wait_for(lane.busy, what="the second call waiting for the lane")
    with pytest.raises(TimeoutError):
        lane.vector("third", 0.0)  # takes the place of "second"
    waiter.join(5)
    assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError)
    embedder.gate.set()
    lane.close()


def test_the_lane_is_busy_only_while_a_call_waits_for_it():
    embedder = LaneEmbedder()
    embedder.gate = threading.Event()
    lane = QueryVectors(embedder)
    with pytest.raises(TimeoutError):
        lane.vector("nobody waits", 0.0)
    assert not lane.busy()  # embedding, but for the next time: documents need not wait
    waiter = threading.Thread(target=lambda: lane.vector("a call waits", 5.0))
    waiter.start()
    wait_for(lane.busy, what="the lane busy")
    embedder.gate.set()
    waiter.join(5)
    assert not lane.busy()
    lane.close()


def test_documents_wait_while_a_call_waits_for_a_query():
    embedder = LaneEmbedder()
    busy = threading.Event()
    busy.set()
    asked = threading.Event()  # the worker has a document and asked whether the lane is busy

    def lane_busy() -> bool:
        asked.set()
        return busy.is_set()

    delivered: list[tuple[str, bool]] = []
    worker = EmbeddingWorker(
        embedder,
        InMemoryStore(),
        lambda entity, vectors, quick: delivered.extend((fid, quick) for fid in vectors),
        RecallStats(),
        lane_busy=lane_busy,
    )
    worker.YIELD_AT_MOST = 10.0  # type: ignore[misc]  (the bound is not what is tested)
    fact = Fact(entity_id="alice", text="Alice adopted a beagle")
    worker.submit([fact])
    assert asked.wait(slack(5))
    asked.clear()
    assert asked.wait(slack(5))  # asked again: it waits for the lane, not embedding meanwhile
    assert embedder.texts == [] and worker.pending == 1
    busy.clear()
    assert worker.flush(5)
    assert embedder.texts == ["Alice adopted a beagle"] and delivered == [(fact.id, False)]
    worker.close()


def test_a_fact_is_findable_by_meaning_before_the_full_model_embeds_it():
    embedder = LaneEmbedder(quick="good")
    mem = memory(embedder)
    mem.recall("warm", entity_id="alice")  # an empty index, loaded
    embedder.gate = threading.Event()  # the full model is stuck behind a backlog
    mem.remember("Alice adopted a beagle", entity_id="alice")
    deadline = time.monotonic() + 5
    blocks: list = []
    while not blocks and time.monotonic() < deadline:
        blocks = inject(mem, "which pet do I own?")
        time.sleep(0.01)
    (block,) = blocks
    assert "Alice adopted a beagle" in block.text
    stats = mem.longterm.engine.stats
    assert stats.facts_quick == 1 and stats.facts_embedded == 0 and stats.vectors_pending == 1
    embedder.gate.set()
    assert mem.longterm.engine.flush(5)
    assert stats.facts_embedded == 1 and stats.vectors_pending == 0
    mem.close()


def test_by_default_a_call_waits_a_little_for_the_full_model_never_its_whole_deadline():
    budget = RecallBudget()
    assert 0 < budget.model_wait < budget.deadline
    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=attrs.evolve(budget, deadline=slack(5.0)))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    embedder.gate = threading.Event()  # the full model answers only when the test says so
    started = time.perf_counter()
    assert inject(mem, "which animal lives with me?") == []
    assert time.perf_counter() - started < slack(0.5), "the call waited past model_wait"
    assert mem.longterm.engine.stats.model_deferred == 1
    embedder.gate.set()
    mem.close()


def test_a_reloaded_index_keeps_the_vectors_the_store_does_not_have_yet():
    embedder = LaneEmbedder(quick="good")
    mem = memory(embedder)
    mem.recall("warm", entity_id="alice")
    embedder.gate = threading.Event()  # the full model is stuck: the fact has a quick vector only
    mem.remember("Alice adopted a beagle", entity_id="alice")
    engine = mem.longterm.engine
    deadline = time.monotonic() + 5
    while engine.stats.facts_quick == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.refresh("alice")  # reloaded from the store, which has no vector for it
    deadline = time.monotonic() + 5
    while engine.stats.index_loads < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.stats.index_loads == 2
    (block,) = inject(mem, "which pet do I own?")
    assert "Alice adopted a beagle" in block.text
    embedder.gate.set()
    mem.close()


def test_a_number_no_fact_says_does_not_make_the_words_look_unsure():
    from memtap.longterm.index import EntityIndex

    index = EntityIndex()
    bike = Fact(entity_id="alice", text="I bought a bike in Lisbon for 48 euros")
    index.add([bike, Fact(entity_id="alice", text="I bought a kettle in Osaka for 12 euros")])
    # 1234 is in no fact: the words that can match all do.
    assert index.shared_terms(bike.id, "1234: I bought a bike in Lisbon") == (3, 1.0)
    # A number some fact says still counts, and a word no fact says too.
    assert index.shared_terms(bike.id, "I bought a bike in Lisbon for 12")[1] < 1.0
    assert index.shared_terms(bike.id, "ticket 1234: I bought a bike in Lisbon")[1] < 1.0


def _overload(mem: memtap.Memory, questions: int = 12) -> None:
    """Calls asking the full model for new questions faster than it makes them."""
    lane = mem.longterm.engine.queries
    assert lane is not None
    lane.cost = 0.1  # a slow model: a few asks a second are more than it can serve
    for i in range(questions):
        inject(mem, f"which creature number {i} do I own?")


def test_under_sustained_load_a_call_does_not_wait_for_the_full_model_and_a_repeat_gets_it():
    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(deadline=slack(5.0), model_wait=slack(1.0)))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    embedder.delay = 0.05
    _overload(mem)
    stats = mem.longterm.engine.stats
    assert stats.model_shed > 0
    shed = stats.model_shed
    embedder.delay = slack(0.5)  # a call that waited would take that long: far from any noise
    started = time.perf_counter()
    assert inject(mem, "which pet do I own?") == []  # only the full model finds it
    assert time.perf_counter() - started < slack(0.4), "a call under load waited for the full model"
    assert stats.model_shed == shed + 1
    # Asked again (a tool loop's next request): not waited for either, but embedded meanwhile.
    assert inject(mem, "which pet do I own?") == []
    lane = mem.longterm.engine.queries
    assert lane is not None
    wait_cached(lane, "which pet do I own?")
    (block,) = inject(mem, "which pet do I own?")
    assert "Alice adopted a beagle" in block.text
    mem.close()


def test_a_question_asked_once_under_load_costs_the_full_model_nothing():
    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(deadline=5.0, model_wait=1.0))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    embedder.delay = 0.05
    _overload(mem)
    embedded = len(embedder.texts)
    inject(mem, "which pet do I own?")
    assert mem.longterm.engine.queries is not None
    lane_idle(mem.longterm.engine.queries)  # had the question been queued, it has run now
    assert "which pet do I own?" not in embedder.texts[embedded:]
    mem.close()


def test_a_budget_that_waits_under_load_still_waits():
    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(deadline=5.0, model_wait=5.0, wait_under_load=True))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    embedder.delay = 0.05
    _overload(mem)
    (block,) = inject(mem, "which pet do I own?")
    assert "Alice adopted a beagle" in block.text
    assert mem.longterm.engine.stats.model_shed == 0
    mem.close()


def _worker(embedder: LaneEmbedder, stats: RecallStats) -> tuple[EmbeddingWorker, dict[str, object]]:
    delivered: dict[str, object] = {}

    def deliver(entity, vectors, quick):
        if not quick:
            delivered.update(vectors)

    quick = getattr(embedder, "quick_query", None)
    return EmbeddingWorker(embedder, InMemoryStore(), deliver, stats, quick=quick), delivered


def test_a_text_embedded_already_is_not_embedded_again():
    embedder = LaneEmbedder(quick="good")
    stats = RecallStats()
    worker, delivered = _worker(embedder, stats)
    first = Fact(entity_id="alice", text="thanks, that works")
    worker.submit([first])
    assert worker.flush(5)
    again = [Fact(entity_id="alice", text="thanks, that works") for _ in range(2)]
    worker.submit(again)
    assert worker.flush(5)
    assert embedder.texts == ["thanks, that works"]
    assert stats.facts_embedded == 1 and stats.vectors_reused == 2
    assert all(f.id in delivered for f in [first, *again])
    worker.close()


def test_an_answer_that_restates_the_users_turn_takes_its_vector_a_real_answer_is_embedded():
    embedder = LaneEmbedder(quick="good")
    stats = RecallStats()
    worker, delivered = _worker(embedder, stats)
    turn = Fact(entity_id="alice", text="I moved to Tokyo", source_exchange_id="x1")
    echo = Fact(
        entity_id="alice", text="You moved to Tokyo.", source_exchange_id="x1", metadata={"role": "assistant"}
    )
    answer = Fact(
        entity_id="alice",
        text="Enjoy the coffee there!",
        source_exchange_id="x1",
        metadata={"role": "assistant"},
    )
    elsewhere = Fact(
        entity_id="alice", text="You moved home.", source_exchange_id="x2", metadata={"role": "assistant"}
    )
    worker.submit([echo, answer, turn, elsewhere])
    assert worker.flush(5)
    embedded = ["I moved to Tokyo", "Enjoy the coffee there!", "You moved home."]
    assert sorted(embedder.texts) == sorted(embedded)
    assert delivered[echo.id] is delivered[turn.id]
    assert stats.vectors_reused == 1
    worker.close()


def test_a_fact_stored_while_the_embedding_thread_is_busy_is_findable_by_meaning_at_once():
    embedder = LaneEmbedder(quick="good")
    mem = memory(embedder)
    mem.recall("warm", entity_id="alice")
    embedder.gate = threading.Event()  # the embedding thread is stuck in the full model
    mem.remember("I work as an engineer", entity_id="alice")
    deadline = time.monotonic() + 5
    while not embedder.texts and mem.longterm.engine.stats.vectors_pending and time.monotonic() < deadline:
        time.sleep(0.01)
        if mem.longterm.engine.worker is not None and mem.longterm.engine.worker._queue.empty():
            break
    mem.remember("Alice adopted a beagle", entity_id="alice")
    # No wait: the second fact's quick vector was made as it was stored.
    (block,) = inject(mem, "which pet do I own?")
    assert "Alice adopted a beagle" in block.text
    embedder.gate.set()
    mem.close()


class CountingStore(InMemoryStore):
    """Counts the writes of vectors (each is a transaction in a real store)."""

    def __init__(self) -> None:
        super().__init__()
        self.vector_writes: list[int] = []

    def set_embeddings(self, embeddings, *, model):
        self.vector_writes.append(len(embeddings))


def test_vectors_are_stored_many_at_a_time_and_all_of_them_by_flush():
    embedder = LaneEmbedder()
    store = CountingStore()
    worker = EmbeddingWorker(embedder, store, lambda entity, vectors, quick: None, RecallStats())
    worker.submit([Fact(entity_id="alice", text=f"fact number {i}") for i in range(40)])
    assert worker.flush(5)
    assert sum(store.vector_writes) == 40
    assert len(store.vector_writes) < 40 // worker.step  # not one write per step
    worker.close()


class ThreadsEmbedder(LaneEmbedder):
    """Records which thread embedded each text."""

    def __init__(self) -> None:
        super().__init__(delay=0.005)
        self.threads: dict[str, str] = {}
        self._lock = threading.Lock()

    def embed(self, texts):
        rows = super().embed(texts)
        with self._lock:
            self.threads.update((t, threading.current_thread().name) for t in texts)
        return rows


def test_a_backlog_is_embedded_on_every_core_while_no_call_runs_and_on_one_during_calls(monkeypatch):
    """What a bulk import or a loop of remember calls left behind (no intercepted call, no
    new fact) gets the model's rate on two cores; while calls run, or facts keep coming,
    documents keep to the one low-priority thread."""
    from memtap.workers import background

    monkeypatch.setattr(EmbeddingWorker, "QUIET_AFTER", 0.0)
    # Quiet whatever earlier tests left (the full core suite leaves a call counted in flight).
    monkeypatch.setattr(background, "_in_flight", 0)
    monkeypatch.setattr(background, "_last_started", float("-inf"))
    embedder = ThreadsEmbedder()
    delivered: dict[str, object] = {}
    worker = EmbeddingWorker(
        embedder,
        InMemoryStore(),
        lambda entity, vectors, quick: delivered.update(vectors),
        RecallStats(),
        cores=2,
    )
    quiet = [Fact(entity_id="alice", text=f"quiet fact {i}") for i in range(24)]
    worker.submit(quiet)
    assert worker.flush(5)
    assert set(delivered) == {f.id for f in quiet}
    assert delivered[quiet[5].id] == _vector("quiet fact 5")  # each row to its own fact
    quiet_threads = {embedder.threads[f.text] for f in quiet}
    assert "memtap-embed" in quiet_threads and any(t.startswith("memtap-embed-helper") for t in quiet_threads)

    background.call_started()  # a call is running: the other core is the app's
    try:
        busy = [Fact(entity_id="alice", text=f"busy fact {i}") for i in range(24)]
        worker.submit(busy)
        assert worker.flush(5)
        assert {embedder.threads[f.text] for f in busy} == {"memtap-embed"}
    finally:
        background.call_ended()

    monkeypatch.setattr(EmbeddingWorker, "QUIET_AFTER", 5.0)  # facts keep coming: just submitted
    monkeypatch.setattr(background, "_last_started", float("-inf"))  # no call for ages
    coming = [Fact(entity_id="alice", text=f"coming fact {i}") for i in range(24)]
    worker.submit(coming)
    assert eventually(lambda: worker.pending == 0, timeout=5)  # nobody waits in flush()
    assert {embedder.threads[f.text] for f in coming} == {"memtap-embed"}
    worker.close()


def test_a_backlog_someone_flushes_is_embedded_on_every_core_unless_a_call_runs(monkeypatch):
    """flush() says the caller waits for the backlog: with no call running it gets both
    cores at once, even though facts came just now (what a process's last calls left when
    it flushes before exiting, or a script after its imports); a call running keeps the
    documents to one thread, flush or not."""
    from memtap.workers import background

    monkeypatch.setattr(EmbeddingWorker, "QUIET_AFTER", 5.0)  # just submitted: not quiet
    monkeypatch.setattr(background, "_in_flight", 0)
    monkeypatch.setattr(background, "_last_started", float("-inf"))
    embedder = ThreadsEmbedder()
    embedder.gate = threading.Event()  # the first step waits until flush() is waiting
    worker = EmbeddingWorker(
        embedder, InMemoryStore(), lambda entity, vectors, quick: None, RecallStats(), cores=2
    )
    flushed = [Fact(entity_id="alice", text=f"flushed fact {i}") for i in range(40)]
    worker.submit(flushed)
    threading.Timer(slack(0.2), embedder.gate.set).start()
    assert worker.flush(slack(10))
    threads = {embedder.threads[f.text] for f in flushed}
    assert any(t.startswith("memtap-embed-helper") for t in threads), threads

    background.call_started()  # a call is running: the other core is the app's
    try:
        embedder.gate = threading.Event()
        busy = [Fact(entity_id="alice", text=f"flushed busy fact {i}") for i in range(40)]
        worker.submit(busy)
        threading.Timer(slack(0.2), embedder.gate.set).start()
        assert worker.flush(slack(10))
        assert {embedder.threads[f.text] for f in busy} == {"memtap-embed"}
    finally:
        background.call_ended()
    worker.close()


def test_a_search_on_an_event_loop_awaits_the_full_model_and_the_loop_goes_on():
    """search_async: the wait for the query's vector is awaited (other tasks run), and the
    search gets the full model's answer; counted once."""
    import asyncio

    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(deadline=10.0, model_wait=10.0))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    engine = mem.longterm.engine
    embedder.gate = threading.Event()
    searches = engine.stats.searches
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while not embedder.gate.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def scenario() -> list:
        ticker = asyncio.create_task(ticking())
        search = asyncio.create_task(
            engine.search_async("which pet do I own?", entity_id="alice", k=3, deadline=10.0, model_wait=10.0)
        )
        await asyncio.sleep(slack(0.3))
        assert not search.done(), "the search did not wait for the full model"
        assert ticks >= 5, "the loop was blocked while the search waited"
        embedder.gate.set()
        hits = await search
        await ticker
        return hits

    hits = asyncio.run(scenario())
    assert hits and hits[0].fact.text == "Alice adopted a beagle"
    assert engine.stats.searches == searches + 1 and engine.stats.model_deferred == 0
    mem.close()


def test_a_search_that_may_not_wait_on_an_event_loop_leaves_the_vector_for_next_time():
    """The blocking search inside ``without_waiting`` (an event loop that did not prefetch)
    never waits for the full model: the lane makes the vector, the next search has it."""
    from memtap.history.injector import without_waiting

    embedder = LaneEmbedder(quick="blind")
    mem = memory(embedder, recall=RecallBudget(deadline=10.0, model_wait=10.0))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    engine = mem.longterm.engine
    embedder.delay = slack(0.5)
    started = time.perf_counter()
    with without_waiting():
        hits = engine.search("which pet do I own?", entity_id="alice", k=3, deadline=10.0, model_wait=10.0)
    assert time.perf_counter() - started < slack(0.3), "the search blocked for the full model"
    assert not any(h.fact.text == "Alice adopted a beagle" and h.score > 0.5 for h in hits or [])
    assert engine.queries is not None
    wait_cached(engine.queries, "which pet do I own?")
    with without_waiting():
        hits = engine.search("which pet do I own?", entity_id="alice", k=3, deadline=10.0, model_wait=10.0)
    assert hits and hits[0].fact.text == "Alice adopted a beagle"
    mem.close()


class _HeldIndex:
    """A background change of the entity's index that runs until released (an index update
    slowed by the GIL or a growing array: the lock the request path takes is held)."""

    def __init__(self, mem: memtap.Memory, entity_id: str) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

        def change(index) -> None:
            self.started.set()
            self.release.wait(slack(10))

        self.thread = threading.Thread(
            target=mem.longterm.engine.indexes.update, args=(entity_id, change), daemon=True
        )

    def __enter__(self) -> _HeldIndex:
        self.thread.start()
        assert self.started.wait(slack(5))
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(slack(5))


@pytest.mark.parametrize("how", ["search", "search_async", "injection"])
def test_recall_keeps_its_deadline_while_a_background_update_holds_the_index(how: str) -> None:
    """The deadline bounds the whole search, the wait for the index included: the call
    goes on without recalled facts (counted) instead of waiting for the update."""
    import asyncio

    mem = memory(LaneEmbedder(quick="good"), recall=RecallBudget(deadline=0.05))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    engine = mem.longterm.engine
    with _HeldIndex(mem, "alice"):
        started = time.monotonic()
        if how == "search":
            found = engine.search("which pet do I own?", entity_id="alice", deadline=0.05)
        elif how == "search_async":
            found = asyncio.run(engine.search_async("which pet do I own?", entity_id="alice", deadline=0.05))
        else:
            found = inject(mem, "which pet do I own?")
        took = time.monotonic() - started
    assert not found
    assert took < slack(0.5), f"the search waited {took:.2f} s for the update"
    assert engine.stats.busy_skips == 1
    assert engine.stats.index_waits == 1
    assert 0.04 <= engine.stats.index_wait_seconds < slack(0.5)  # its deadline, not the update
    # Once the update is done, the same question is answered.
    assert any("beagle" in block.text for block in inject(mem, "which pet do I own?"))


def test_without_a_deadline_recall_waits_for_the_update() -> None:
    mem = memory(LaneEmbedder(quick="good"))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    held = _HeldIndex(mem, "alice")
    with held:
        threading.Timer(0.2, held.release.set).start()
        hits = mem.recall("which pet do I own?", entity_id="alice")
    assert [h.fact.text for h in hits][:1] == ["Alice adopted a beagle"]
    stats = mem.longterm.engine.stats
    assert stats.busy_skips == 0
    assert stats.index_waits == 1 and stats.index_wait_seconds >= 0.15


def test_a_search_that_finds_the_index_free_counts_no_wait() -> None:
    mem = memory(LaneEmbedder(quick="good"), recall=RecallBudget(deadline=0.05))
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    assert any("beagle" in block.text for block in inject(mem, "which pet do I own?"))
    stats = mem.longterm.engine.stats
    assert (stats.index_waits, stats.index_wait_seconds, stats.busy_skips) == (0, 0.0, 0)


def test_the_quick_answer_stands_when_the_index_is_taken_while_the_full_model_answers() -> None:
    embedder = LaneEmbedder(quick="good")
    mem = memory(embedder)
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm", entity_id="alice")
    question = "which pet do I own?"  # no word of the fact: the full model is asked too
    held = _HeldIndex(mem, "alice")
    model = embedder.embed

    def embed(texts):
        if question in texts:
            held.__enter__()  # a background change takes the index while the model answers
        return model(texts)

    embedder.embed = embed  # type: ignore[method-assign]
    engine = mem.longterm.engine
    escalations = engine.stats.escalations
    try:
        found = engine.search(question, entity_id="alice", deadline=slack(0.5), model_wait=slack(0.5))
    finally:
        held.__exit__()
    assert engine.stats.escalations == escalations + 1
    assert [h.fact.text for h in found or []] == ["Alice adopted a beagle"]
    assert engine.stats.busy_skips == 1


def test_a_change_of_an_uncached_entity_reads_nothing() -> None:
    """What a change reads of its facts and vectors is read only for an entity whose index
    is cached (an uncached one reads the store when it loads)."""
    mem = memory(LaneEmbedder(quick="good"))
    mem.recall("warm", entity_id="alice")  # alice's index is cached, bob's is not
    indexes = mem.longterm.engine.indexes
    read: list[str] = []
    for entity in ("alice", "bob"):
        indexes.update_with(entity, lambda entity=entity: read.append(entity), lambda index, _: None)
    assert read == ["alice"]


class LateQuickEmbedder(LaneEmbedder):
    """A quick path that has nothing (``None``) until :attr:`quick_ready` is set, as while
    a process's quick table is still loading; a full model whose first batch sets
    :attr:`embedding` and ends when :attr:`first_done` is set, and whose later batches
    wait for :attr:`rest`."""

    def __init__(self) -> None:
        super().__init__(quick="good")
        self.quick_ready = threading.Event()
        self.embedding = threading.Event()
        self.first_done = threading.Event()
        self.rest = threading.Event()

    def _quick_query(self, text):
        # A text of no word the quick table knows has no quick vector, even when it is ready.
        if not self.quick_ready.is_set() or text.startswith("@@"):
            return None
        return super()._quick_query(text)

    def embed(self, texts):
        if not self.embedding.is_set():
            self.embedding.set()
            self.first_done.wait(10)
        else:
            self.rest.wait(10)
        return super().embed(texts)


def late_quick_worker(
    embedder: LateQuickEmbedder,
) -> tuple[EmbeddingWorker, dict[str, object], dict[str, object]]:
    """A one-thread worker over ``embedder``, and the quick and the full vectors it
    delivers, by fact id."""
    quick_of: dict[str, object] = {}
    full_of: dict[str, object] = {}

    def deliver(entity, vectors, quick):
        (quick_of if quick else full_of).update(vectors)

    worker = EmbeddingWorker(
        embedder, InMemoryStore(), deliver, RecallStats(), quick=embedder.quick_query, cores=1
    )
    return worker, quick_of, full_of


@pytest.mark.parametrize(
    "unquickable_waits_first", [False, True], ids=["plain", "first-waiting-has-no-quick-vector"]
)
def test_facts_queued_before_the_quick_path_was_ready_get_quick_vectors_once_it_is(unquickable_waits_first):
    """A busy process's first facts arrive before its quick table has loaded (the warm-up
    waits for a quiet moment; in a soak of back-to-back calls, ~4 s and ~500 calls): they
    must not wait for the full model, which takes minutes for a backlog, to become
    findable by meaning."""
    embedder = LateQuickEmbedder()
    worker, quick_of, full_of = late_quick_worker(embedder)
    facts = [Fact(entity_id="alice", text=f"note {i}: my {i}th dog is a beagle") for i in range(24)]
    if unquickable_waits_first:  # after the model's first batch: the first fact still waiting
        facts.insert(worker.step, Fact(entity_id="alice", text="@@ ## @@"))
    worker.submit(facts)
    assert embedder.embedding.wait(5)
    assert not quick_of  # nothing to make them with yet
    embedder.quick_ready.set()
    embedder.first_done.set()
    quickable = [f for f in facts if not f.text.startswith("@@")]
    wait_for(
        lambda: all(f.id in quick_of or f.id in full_of for f in quickable), what="every fact has a vector"
    )
    # As soon as the model's first batch of four ended: its later ones wait.
    assert len(full_of) == worker.step, len(full_of)
    assert worker.stats.facts_quick == len(quick_of) == len(quickable) - worker.step
    embedder.rest.set()
    worker.close()


def test_facts_in_a_batch_waiting_for_the_model_get_quick_vectors_when_the_next_facts_come():
    """The model's first batch may wait for the model itself (still loading in a new
    process on a busy machine: seconds). Facts stored before the quick table was ready are
    in that batch; once the table is ready, the next fact stored gives them their quick
    vectors too, rather than leaving them findable by words only until the model runs (an
    MCP server's first ``remember``, then another, then ``recall``: the first fact lost to
    the second on meaning)."""
    embedder = LateQuickEmbedder()
    worker, quick_of, full_of = late_quick_worker(embedder)
    first = [Fact(entity_id="alice", text="my dog is a beagle"), Fact(entity_id="alice", text="@@ ## @@")]
    worker.submit(first)
    assert embedder.embedding.wait(5)  # the worker took them, and waits for the model
    assert not quick_of
    embedder.quick_ready.set()  # the table is loaded; the model is still loading
    later = Fact(entity_id="alice", text="I drink tea")
    worker.submit([later])
    assert later.id in quick_of
    assert first[0].id in quick_of, "a fact stored before the table waited for the model"
    assert first[1].id not in quick_of  # no word the table knows: the model's vector only
    assert not full_of
    embedder.first_done.set()
    embedder.rest.set()
    assert worker.flush(5)
    assert {f.id for f in [*first, later]} <= set(full_of)
    worker.close()
