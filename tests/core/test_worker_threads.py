"""memtap's background workers start their thread on first use, from whatever thread submits
work. Closing memtap while that first start is still in progress (an app that calls
``close(0)`` as its first facts are queued) must stop the worker cleanly, never fail with
``RuntimeError: cannot join thread before it is started`` (seen in the reliability suite's
``exit-now`` case)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from memtap.capture.writer import CapturedCall, CaptureWriter
from memtap.longterm.memorize import Memorizer
from memtap.longterm.recall import EmbeddingWorker, RecallEngine, RecallStats
from memtap.protocol.model import Attribution, Exchange, Fact, Message
from memtap.storage.store import InMemoryStore
from memtap.testing.threads import HeldStart, held_start
from memtap.workers.background import LazyThread


class Embedder:
    name = "threads-v1"

    def embed(self, texts):
        return [[1.0, 0.0] for _ in texts]


def exchange() -> Exchange:
    return Exchange(
        attribution=Attribution(entity_id="alice", session_id="s1"),
        provider="test",
        operation="chat",
        input=[Message(role="user", content="I moved to Lisbon last week")],
        output=[Message(role="assistant", content="How exciting!")],
        id="ex001",
    )


def embedding_worker() -> tuple[Any, Callable[[], None]]:
    worker = EmbeddingWorker(Embedder(), InMemoryStore(), lambda entity, vectors, quick: None, RecallStats())
    return worker, lambda: worker.submit([Fact(entity_id="alice", text="I moved to Lisbon")])


def capture_writer() -> tuple[Any, Callable[[], None]]:
    writer = CaptureWriter(lambda exchanges: None)
    made = exchange()
    return writer, lambda: writer.submit(CapturedCall(lambda: made))


def memorizer() -> tuple[Any, Callable[[], None]]:
    store = InMemoryStore()
    memo = Memorizer(store, RecallEngine(store, None), None)
    return memo, lambda: memo.submit([exchange()])


WORKERS = {
    "memtap-embed": embedding_worker,
    "memtap-writer": capture_writer,
    "memtap-memorize": memorizer,
}


@pytest.mark.parametrize("name", list(WORKERS))
def test_close_while_the_workers_thread_is_being_started_stops_it_cleanly(name):
    with held_start(name) as held:
        worker, submit = WORKERS[name]()
        submitter = threading.Thread(target=submit, name="test-submitter")
        submitter.start()
        assert held.starting.wait(5)
        errors = close_meanwhile(worker, held)
        submitter.join(5)
    assert not submitter.is_alive()
    assert not errors, errors
    thread = worker._thread.started()  # this worker's own (other tests leave theirs)
    assert thread is not None and thread.name == name
    thread.join(5)
    assert not thread.is_alive(), "the worker's thread was left running"


def close_meanwhile(worker: Any, held: HeldStart) -> list[BaseException]:
    """``worker.close(0)`` begun while its thread's start is held, then the start let go:
    what the close raised."""
    errors: list[BaseException] = []

    def close() -> None:
        try:
            worker.close(0.0)
        except BaseException as exc:  # what the app's close would have raised
            errors.append(exc)

    closer = threading.Thread(target=close, name="test-closer")
    closer.start()
    time.sleep(0.05)  # the close is under way while the start has not returned
    held.release()
    closer.join(5)
    assert not closer.is_alive()
    return errors


def test_a_lazy_thread_starts_once_and_is_seen_only_once_started():
    ran = threading.Event()
    lazy = LazyThread(ran.set, "lazy-test")
    assert lazy.started() is None
    lazy.start()
    lazy.start()
    thread = lazy.started()
    assert thread is not None and thread.name == "lazy-test" and thread.daemon
    thread.join(5)
    assert ran.is_set()
    assert [t for t in threading.enumerate() if t.name == "lazy-test"] == []
