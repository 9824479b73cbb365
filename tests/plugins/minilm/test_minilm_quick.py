"""The quick query table: built in the background in chunks that survive the process,
shared between processes, loaded once ready; its vectors live in MiniLM's own space."""

from __future__ import annotations

import datetime as _dt
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import memtap
import memtap_minilm
from memtap.storage.store import InMemoryStore
from memtap.testing import paraphrases
from memtap.testing.threads import held_start
from memtap_minilm import quick
from memtap_minilm.embedder import DIM, MiniLMEmbedder
from memtap_minilm.quick import QuickQueryTable

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)

# -- the build machinery, on a small vocabulary and a deterministic model stand-in -------


class TokenModel:
    """A deterministic stand-in for the model run: row = f(middle token id). Records the
    token ids it was run on; ``gate`` (optional) blocks each run until set."""

    def __init__(self, dim: int = 8, pause_after: int | None = None) -> None:
        self.dim = dim
        self.seen: list[int] = []
        self.pause_after = pause_after
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        assert ids.shape[1] == 3 and mask.all()
        assert (ids[:, 0] == 101).all() and (ids[:, 2] == 102).all()
        if self.pause_after is not None and len(self.seen) >= self.pause_after:
            self.paused.set()
            self.resume.wait(10)
        with self.lock:
            self.seen.extend(int(i) for i in ids[:, 1])
        rows = np.zeros((len(ids), self.dim), np.float32)
        rows[:, 0] = 1.0
        rows[np.arange(len(ids)), 1 + ids[:, 1] % (self.dim - 1)] = 2.0
        return rows


CHUNK = 64


@pytest.fixture
def small(tmp_path):
    def make(
        model: TokenModel | None = None, vocab: int = 300, first_word: int | None = None
    ) -> tuple[QuickQueryTable, TokenModel]:
        model = model or TokenModel()
        table = QuickQueryTable(
            tmp_path / "table",
            vocab,
            model.dim,
            model,
            (101, 102),
            chunk_tokens=CHUNK,
            batch_tokens=16,
            first_word=first_word,
        )
        return table, model

    return make


def test_not_ready_until_built_then_every_token_has_a_row(small):
    table, model = small()
    assert table.vector([5, 6]) is None  # starts the build, answers nothing yet
    assert table.wait(30)
    assert sorted(model.seen) == list(range(300))  # each token run once
    assert table.table_path.is_file()
    assert not list(table.directory.glob("chunk-*"))  # chunks merged, then removed
    v = table.vector([5, 6])
    assert v is not None and v.dtype == np.float32 and np.isclose(np.linalg.norm(v), 1.0)
    assert table.vector([]) is None


def test_without_a_first_word_every_token_weighs_the_same(small):
    table, _ = small()
    assert table.wait(30)
    rows = np.load(table.table_path).astype(np.float32)
    expected = rows[[5, 6, 6]].mean(axis=0) - quick.CENTERING * rows.mean(axis=0)
    assert np.allclose(table.vector([5, 6, 6]), expected / np.linalg.norm(expected), atol=1e-6)


def test_tokens_weigh_by_their_rank_in_the_vocabulary():
    """A WordPiece vocabulary lists special, unused and single-character tokens first, then
    its words and word pieces most frequent first: a token's weight grows with its rank."""
    vocab = {"[PAD]": 0, "[CLS]": 1, "!": 2, "a": 3, "the": 4, "of": 5, "##s": 6, "beagle": 7}
    assert quick.first_word_id(vocab) == 4
    assert quick.first_word_id({"[CLS]": 0, "a": 1, "##b": 2}) is None
    weights = quick.token_weights(8, 4)
    assert weights is not None
    ranks = np.array([1, 1, 1, 1, 1, 2, 3, 4])
    assert np.allclose(weights, ranks / (ranks + quick.ZIPF_HALF))
    assert quick.token_weights(8, None) is None


def test_query_vector_is_the_centred_weighted_mean_of_its_token_rows(small):
    table, _ = small(first_word=10)
    assert table.wait(30)
    rows = np.load(table.table_path).astype(np.float32)  # on disk: the model's rows alone
    weights = quick.token_weights(300, 10)
    assert weights is not None
    ids = [5, 60, 60, 250]
    mean = (rows[ids] * weights[ids, None]).sum(axis=0) / weights[ids].sum()
    expected = mean - quick.CENTERING * rows.mean(axis=0)
    assert np.allclose(table.vector(ids), expected / np.linalg.norm(expected), atol=2e-3)


def test_a_finished_table_is_loaded_without_running_the_model(small):
    first, _ = small()
    assert first.wait(30)
    second, model = small()
    assert second.wait(5)
    assert model.seen == []
    assert np.allclose(second.vector([7]), first.vector([7]))


def test_a_stopped_build_keeps_its_finished_chunks_and_a_later_one_resumes(small):
    table, model = small(TokenModel(pause_after=2 * CHUNK + 16))
    table.start()
    assert model.paused.wait(10)  # in the middle of the third chunk
    table.stop(timeout=0)  # asks the build to stop...
    model.resume.set()
    table.stop()  # ...and waits for it
    kept = len(list(table.directory.glob("chunk-[0-9][0-9][0-9].npy")))
    assert kept == 2 and not table.ready.is_set()
    assert not list(table.directory.glob("*.lock"))
    resumed, again = small()
    assert resumed.wait(30)
    assert len(again.seen) <= 300 - kept * CHUNK  # finished chunks not redone
    assert resumed.vector([1]) is not None


def test_a_chunk_another_process_is_making_is_waited_for(small, monkeypatch):
    table, model = small()
    table.directory.mkdir(parents=True)
    lock = table.directory / "chunk-001.lock"
    lock.touch()  # fresh: someone else is on it
    table.start()
    while len(model.seen) < 300 - CHUNK:
        threading.Event().wait(0.01)
    assert not table.ready.wait(0.3)  # still waiting for chunk 1
    assert not set(range(64, 128)) & set(model.seen)
    other, _ = small()
    np.save(table.directory / "chunk-001.npy", other._make_chunk(1))
    lock.unlink()
    assert table.wait(30)
    assert table.vector([70]) is not None


def test_a_stale_lock_is_taken_over(small):
    import os

    table, model = small()
    table.directory.mkdir(parents=True)
    lock = table.directory / "chunk-000.lock"
    lock.touch()
    os.utime(lock, (0, 0))  # abandoned long ago
    assert table.wait(30)
    assert sorted(model.seen) == list(range(300))


# -- several processes on one cache directory: nobody waits for what will never come ----


def _held_by(table: QuickQueryTable, index: int) -> Path:
    """The lock of chunk ``index``, as another live process holding it would leave it."""
    lock = table.directory / f"chunk-{index:03d}.lock"
    lock.write_text(f"{socket.gethostname()} {os.getpid()}")
    return lock


def test_a_waiter_loads_the_table_another_process_assembled(small):
    """The reported hang: B waits for chunk 0, which A is making; A then assembles the table
    and removes the chunks. B must load A's table, not wait 600 s for chunks that are gone."""
    a, slow = small(TokenModel(pause_after=16))
    a.start()
    assert slow.paused.wait(10)  # A holds chunk 0's lock, in the middle of it
    b, model = small()
    b.start()
    assert _eventually(lambda: len(model.seen) == 300 - CHUNK, 10)  # B made chunks 1-4
    assert not b.ready.wait(0.3)  # ...and waits for chunk 0
    slow.resume.set()
    assert a.wait(10)
    assert not list(a.directory.glob("chunk-*.npy"))  # A assembled, chunks removed
    try:
        assert b.wait(5), "B still waits for chunks A has removed"
        assert not set(range(CHUNK)) & set(model.seen)  # chunk 0 was not made twice
        assert np.array_equal(b._table, a._table)
    finally:
        b.stop(timeout=5)


def test_a_chunk_whose_maker_died_is_made_at_once(small, tmp_path):
    """A process killed while making a chunk leaves its lock behind, fresh: a waiter on
    the same host sees that the holder is gone and makes the chunk itself."""
    table, model = small()
    started = tmp_path / "started"
    maker = subprocess.Popen([sys.executable, "-c", _DYING_MAKER, str(table.directory), str(started)])
    try:
        assert _eventually(started.exists, 60)
    finally:
        maker.kill()
        maker.wait(10)  # reaped: its pid no longer runs
    lock = table.directory / "chunk-000.lock"
    assert lock.exists() and time.time() - lock.stat().st_mtime < quick.STALE_LOCK_SECONDS
    try:
        assert table.wait(10), "waiting for a chunk whose maker is dead"
        assert set(range(CHUNK)) <= set(model.seen)
    finally:
        table.stop(timeout=5)


_DYING_MAKER = """
import sys, time
from pathlib import Path
from memtap_minilm.quick import QuickQueryTable

def run(ids, mask):
    Path(sys.argv[2]).touch()
    time.sleep(3600)  # killed in the middle of chunk 0

QuickQueryTable(Path(sys.argv[1]), 300, 8, run, (101, 102), chunk_tokens=64, batch_tokens=16).wait()
"""


def test_a_lock_held_by_a_live_process_is_waited_for(small):
    """The other side of the test above: a holder that still runs keeps its chunk."""
    table, model = small()
    table.directory.mkdir(parents=True)
    lock = _held_by(table, 1)
    try:
        table.start()
        assert _eventually(lambda: len(model.seen) == 300 - CHUNK, 10)
        assert not table.ready.wait(0.5)
        np.save(table.directory / "chunk-001.npy", small()[0]._make_chunk(1))
        lock.unlink()
        assert table.wait(10)
        assert not set(range(CHUNK, 2 * CHUNK)) & set(model.seen)
    finally:
        table.stop(timeout=5)


@pytest.mark.parametrize("damage", ["truncated", "wrong shape"])
def test_a_damaged_chunk_is_made_again(small, damage):
    """A chunk file that cannot be read whole (a crash before it reached the disk, a copy
    from elsewhere) is made again, not an error every process meets from then on."""
    table, model = small()
    table.directory.mkdir(parents=True)
    path = table.directory / "chunk-002.npy"
    np.save(path, np.ones((CHUNK if damage == "truncated" else 3, 8), np.float16))
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    try:
        assert table.wait(10), table.error
        assert sorted(model.seen) == list(range(300))
        assert table._table is not None and table._table.shape == (300, 8)
    finally:
        table.stop(timeout=5)


def test_a_damaged_table_is_built_again(small):
    first, _ = small()
    assert first.wait(10)
    first.table_path.write_bytes(first.table_path.read_bytes()[:1000])
    second, model = small()
    assert second.wait(10)
    assert sorted(model.seen) == list(range(300))
    assert np.array_equal(np.load(second.table_path), first._table)


def test_tables_assembling_at_once_all_end_with_the_table(tmp_path):
    """Every chunk is there and three tables assemble at the same moment: the first to
    finish removes the chunks while the others may still be reading them. Each must end
    with the table (the one published), none with an error."""
    vocab = 400  # chunk_tokens=1: one file per token, a long read
    maker = QuickQueryTable(tmp_path / "maker", vocab, 8, TokenModel(), (101, 102), chunk_tokens=1)
    chunks = [maker._make_chunk(i) for i in range(vocab)]
    for trial in range(10):
        directory = tmp_path / f"trial-{trial}"
        directory.mkdir()
        for i, rows in enumerate(chunks):
            np.save(directory / f"chunk-{i:03d}.npy", rows)
        tables = [
            QuickQueryTable(directory, vocab, 8, TokenModel(), (101, 102), chunk_tokens=1) for _ in range(3)
        ]
        for t in tables:
            t.start()
        try:
            for t in tables:
                assert t.wait(10), (trial, repr(t.error))
                assert np.array_equal(t._table, np.concatenate(chunks))
        finally:
            for t in tables:
                t.stop(timeout=5)


def test_waiting_ends_when_the_build_stops(small):
    """A build that stops (at exit) before the table is ready ends every wait at once."""
    table, model = small(TokenModel(pause_after=16))
    table.start()
    assert model.paused.wait(10)
    table.stop(timeout=0)
    model.resume.set()
    began = time.monotonic()
    assert table.wait(10) is False
    assert time.monotonic() - began < 5


def test_a_failing_build_is_reported_not_raised(small, caplog):
    def broken(ids, mask):
        raise RuntimeError("model gone")

    table = QuickQueryTable(small()[0].directory, 300, 8, broken, (101, 102), chunk_tokens=CHUNK)
    assert table.wait(30) is False
    assert isinstance(table.error, RuntimeError)
    assert table.vector([1]) is None
    assert "quick query table" in caplog.text


# -- the real table, built once for this module ------------------------------------------

FACTS = [
    "I adopted a beagle called Mochi last week.",
    "I work as a nurse at the city hospital.",
    "My sister lives in Lisbon.",
    "I'm allergic to peanuts.",
    "We went hiking in the Alps in June.",
    "I drive a red Toyota.",
    "My favourite band is Radiohead.",
]
PARAPHRASES = [
    ("what dog do I have?", 0),
    ("what's my job?", 1),
    ("where does my sibling live?", 2),
    ("what can't I eat?", 3),
    ("where did we go on holiday?", 4),
    ("what car do I own?", 5),
    ("which music do I like?", 6),
]


@pytest.fixture(scope="module")
def ready_embedder(quick_table_cache):
    e = MiniLMEmbedder()
    assert e.prepare_quick_queries(timeout=900)  # the real build: ~45 s of one core
    assert str(e._quick.directory).startswith(str(quick_table_cache))
    return e


def test_quick_vectors_find_facts_by_meaning_like_the_full_model(ready_embedder):
    facts = ready_embedder.embed(FACTS)
    questions = [q for q, _ in PARAPHRASES]
    full = ready_embedder.embed(questions)
    for i, (question, answer) in enumerate(PARAPHRASES):
        q = ready_embedder.quick_query(question)
        assert q is not None and q.shape == (DIM,)
        assert int(np.argmax(facts @ q)) == answer, question
        assert float(full[i] @ q) > 0.2  # the same space as the full model's vector


def test_recall_by_meaning_with_the_quick_table(ready_embedder):
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=ready_embedder)
    for text in FACTS:
        mem.remember(text, entity_id="alice")
    for question, answer in PARAPHRASES:
        assert mem.recall(question, entity_id="alice", k=1)[0].text == FACTS[answer], question
    stats = mem.longterm.engine.stats
    assert stats.quick_queries == len(PARAPHRASES) and stats.lexical_only == 0
    # Every question has a word no fact uses ("dog", "job", "sibling"...): meaning must
    # bridge it, so the full model was asked too.
    assert stats.escalations == len(PARAPHRASES)
    # A question in the facts' own words is answered from the quick vector alone.
    assert mem.recall("my sister in Lisbon", entity_id="alice", k=1)[0].text == FACTS[2]
    assert "my sister in Lisbon" not in mem.longterm.engine.queries._cache
    assert stats.escalations == len(PARAPHRASES)
    mem.close()


def _ranks(embedder, texts):
    """Where each paraphrased question's answer ranks in recall's top 10 (``None``: not
    there), with ``texts`` remembered a minute apart (recency breaks ties the same way)."""
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder)
    for i, text in enumerate(texts):
        mem.remember(text, entity_id="user", at=T0 + _dt.timedelta(minutes=i))
    ranks = {}
    for question, answer in paraphrases.questions():
        found = [s.text for s in mem.recall(question, entity_id="user", k=10)]
        ranks[question] = found.index(answer) if answer in found else None
    stats = mem.recall_stats()
    mem.close()
    return ranks, stats


@pytest.fixture(scope="module")
def full_embedder():
    return MiniLMEmbedder(quick_queries=False)


@pytest.mark.parametrize("traps", [False, True], ids=["answers", "answers+traps"])
def test_default_recall_matches_the_full_model_on_paraphrased_questions(ready_embedder, full_embedder, traps):
    """Questions asked in other words than their facts (memtap.testing.paraphrases): the
    default (quick vectors, escalating when unsure) finds every answer the full model
    finds, at least as high; quick vectors alone would lose a third of them."""
    texts = paraphrases.facts() if traps else [fact for fact, _ in paraphrases.PAIRS]
    default, stats = _ranks(ready_embedder, texts)
    full, _ = _ranks(full_embedder, texts)

    def within(ranks, k):
        return {q for q, r in ranks.items() if r is not None and r < k}

    for k in (1, 5, 10):
        assert within(full, k) <= within(default, k), k
    assert len(within(full, 5)) >= 0.75 * len(full)  # the set is answerable by meaning
    assert stats.quick_queries == len(paraphrases.PAIRS)  # the quick path was tried first
    assert stats.escalations >= 0.9 * len(paraphrases.PAIRS)


def test_quick_vectors_alone_lose_paraphrases(ready_embedder, full_embedder):
    """Why recall escalates: never asking the full model finds fewer answers than the full
    model does (what the test above guards against, measured, so that it cannot pass
    vacuously). In the top 5 of 120: quick vectors alone 99 (69 with uniform token
    weights), the full model 117."""

    def found(embedder, escalate: bool) -> int:
        texts = [fact for fact, _ in paraphrases.PAIRS]
        mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder)
        for i, text in enumerate(texts):
            mem.remember(text, entity_id="user", at=T0 + _dt.timedelta(minutes=i))
        if not escalate:
            mem.longterm.engine._words_carry = lambda *_: True  # never escalate
        hits = sum(
            answer in [s.text for s in mem.recall(question, entity_id="user", k=5)]
            for question, answer in paraphrases.questions()
        )
        mem.close()
        return hits

    assert found(ready_embedder, escalate=False) <= found(full_embedder, escalate=True) - 10


#: A long turn and a long real answer: most of their tokens are the same function words.
LONG_TURN = (
    "ok so I need help with a message to my neighbour, he keeps parking his van across our "
    "driveway and this morning I could not get the car out to take the kids to school. I have "
    "asked him nicely twice already and I do not want a fight but it has to stop. can you write "
    "something short I can put through his door tonight? I want it to be polite but I also want "
    "him to know that we are not happy about it and that if it happens again we will have to "
    "talk to the council about it."
)
LONG_ANSWER = (
    'Of course, here is a short and friendly note you could use: "Hi Tom, I hope you are well. '
    "I wanted to mention that the van has been parked across our driveway a few times lately, "
    "and this morning we could not get out for the school run. Could you please leave the "
    'driveway clear from now on? Thanks so much, I really appreciate it." Keeping it warm but '
    "clear usually works best. If it happens again after that, it would be reasonable to talk "
    "to him in person first, and only then to think about the council."
)


class RecordingEmbedder(MiniLMEmbedder):
    """MiniLM, recording each text its full model is given."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts):
        self.texts.extend(texts)
        return super().embed(texts)


def test_a_long_answer_is_embedded_and_an_echo_takes_its_turns_vector(ready_embedder, monkeypatch):
    """An answer takes its turn's full vector when their quick vectors are alike enough to
    be a restatement (memtap.longterm.reuse). With every token weighing the same, long texts
    are alike through their function words: this real answer came out 0.965 alike to its
    turn, above the 0.95 bar, and was never embedded (so recall could not find it by its own
    meaning); weighted by rarity it is 0.90, while an echo stays at 0.99."""
    from memtap.longterm.reuse import RESTATES
    from memtap.workers import background

    def alike(a: str, b: str) -> float:
        return float(ready_embedder.quick_query(a) @ ready_embedder.quick_query(b))

    assert alike(LONG_TURN, LONG_ANSWER) < RESTATES
    assert alike("I moved to Tokyo in May", "You moved to Tokyo in May.") >= RESTATES
    assert alike("I bought a bike in Accra", "I bought a bike in Lisbon") < RESTATES

    monkeypatch.setattr(background, "_in_flight", 0)
    background.call_started()  # calls are running: answers are embedded as they come
    try:
        embedder = RecordingEmbedder()
        assert embedder.prepare_quick_queries(timeout=60)
        mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder)
        mem.recall("warm", entity_id="alice")
        other_turn = "My neighbour finally moved his van, so the driveway is clear again."
        echo = f"You said: {other_turn}"
        for turn, answer in ((LONG_TURN, LONG_ANSWER), (other_turn, echo)):
            mem.capture(
                [{"role": "user", "content": turn}],
                [{"role": "assistant", "content": answer}],
                entity_id="alice",
            )
        mem.flush()
        assert mem.longterm.engine.flush(60)
        assert LONG_TURN in embedder.texts and other_turn in embedder.texts
        assert LONG_ANSWER in embedder.texts
        assert echo not in embedder.texts
        mem.close()
    finally:
        background.call_ended()


def test_minilm_full_spec_turns_quick_queries_off():
    assert memtap_minilm.memtap_embedder(spec="minilm-full").quick_queries is False
    assert memtap_minilm.memtap_embedder(spec="minilm").quick_queries is True
    assert MiniLMEmbedder(quick_queries=False).quick_query("anything") is None


def test_quick_query_ids_are_the_whole_texts_ids(ready_embedder, monkeypatch):
    """Words are tokenized one by one (and cached); the ids must be those of the text."""
    seen: list[list[int]] = []
    monkeypatch.setattr(ready_embedder._quick, "vector", lambda ids: seen.append(list(ids)))
    tokenizer = ready_embedder._tokenizer
    texts = [
        "What did I tell you about my dog?",
        "Café résumé naïve — Über-cool",
        "東京で寿司を食べた and then ramen",
        "hello_world foo-bar (baz)!! 3.14 e-mail: a@b.c",
        "  tabs\tand\nnewlines  ",
        "what did I tell you about my dog?",  # the cached words again
        "a long question " * 150,  # truncated like a whole text (256 tokens)
    ]
    for text in texts:
        ready_embedder.quick_query(text)
        assert seen.pop() == tokenizer.encode(text, add_special_tokens=False).ids, text


def test_quick_vectors_answer_while_the_model_is_still_loading(ready_embedder):
    """The warm-up loads the tokenizer and the quick table before the model: recall on a
    request path gets quick vectors (meaning, not only words) while the model loads."""
    gate = threading.Event()

    class SlowModel(MiniLMEmbedder):
        def load(self) -> None:
            gate.wait(30)
            super().load()

    e = SlowModel()
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=e)
    mem.longterm.store.add_facts([memtap.Fact(entity_id="alice", text=text) for text in FACTS])
    assert mem.longterm.engine.indexes.get("alice", wait=True) is not None
    mem.longterm.warm_up()
    assert e._quick is not None or _eventually(lambda: e._quick is not None)
    assert _eventually(lambda: e.quick_query("my sister") is not None)
    assert e._session is None  # the model is still loading
    # Asked in the facts' own words: the quick vector alone answers.
    hits = mem.recall("my sister in Lisbon", entity_id="alice", k=1, deadline=0.5)
    assert hits[0].text == FACTS[2]
    stats = mem.longterm.engine.stats
    assert stats.quick_queries == 1 and stats.lexical_only == 0
    gate.set()
    mem.close()


def _eventually(condition, timeout: float = 30.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_waiting_for_a_table_whose_build_is_starting_in_another_thread_does_not_fail(small):
    """The warm-up thread starts the build while the app asks for the table
    (``prepare_quick_queries``): a wait that came during the start must wait for the build,
    never join a thread not started yet (``RuntimeError: cannot join thread before it is
    started``; the same race as the core workers')."""
    table, _ = small()
    outcome: list[object] = []

    def wait() -> None:
        try:
            outcome.append(table.wait(30))
        except BaseException as exc:
            outcome.append(exc)

    with held_start("memtap-quick-table") as held:
        starter = threading.Thread(target=table.start, name="test-warm-up")
        starter.start()
        assert held.starting.wait(5)
        waiter = threading.Thread(target=wait, name="test-app")
        waiter.start()
        time.sleep(0.05)  # the wait is under way while the start has not returned
        held.release()
        waiter.join(30)
        starter.join(5)
    assert outcome == [True]
