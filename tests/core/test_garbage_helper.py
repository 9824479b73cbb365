"""``collect_garbage``: one ``gc.collect()`` collects nothing while another thread's
collection is under way (the flake the derived-client tests hit on CI); the helper waits
for a collection of its own."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from memtap.testing.garbage import collect_garbage


class Cycle:
    """Garbage only the cyclic collector frees."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collecting_elsewhere():
    """Another thread's collection, held open in a finalizer until the test releases it."""
    started, release = threading.Event(), threading.Event()

    class Slow(Cycle):
        def __del__(self) -> None:
            started.set()
            release.wait(10)

    def collect() -> None:
        Slow()
        gc.collect()

    thread = threading.Thread(target=collect)
    thread.start()
    assert started.wait(10)
    yield release
    release.set()
    thread.join(10)


def test_one_collect_skips_while_another_thread_collects(collecting_elsewhere):
    garbage = Cycle()
    ref = weakref.ref(garbage)
    del garbage
    gc.collect()
    assert ref() is not None, "gc.collect() ran though another thread was collecting"


def test_collect_garbage_waits_for_a_collection_of_its_own(collecting_elsewhere):
    garbage = Cycle()
    ref = weakref.ref(garbage)
    del garbage
    threading.Timer(0.1, collecting_elsewhere.set).start()
    collect_garbage()
    assert ref() is None


def test_collect_garbage_says_when_no_collection_could_run(collecting_elsewhere, monkeypatch):
    monkeypatch.setenv("MEMTAP_TEST_SLACK", "1")
    with pytest.raises(AssertionError, match=r"no garbage collection could run within 0\.1 s"):
        collect_garbage(timeout=0.1)
