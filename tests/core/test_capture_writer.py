from __future__ import annotations

import logging
import threading
import time

import pytest

from memtap.capture.writer import CapturedCall, CaptureWriter
from memtap.protocol.model import Attribution, Exchange, Message
from memtap.testing.timing import eventually, slack


def make_exchange(i: int) -> Exchange:
    return Exchange(
        attribution=Attribution(entity_id="alice", session_id="s1"),
        provider="test",
        operation="chat",
        input=[Message(role="user", content=f"message {i}")],
        output=[Message(role="assistant", content=f"reply {i}")],
        id=f"ex{i:03d}",
    )


def captured(i: int) -> CapturedCall:
    exchange = make_exchange(i)
    return CapturedCall(lambda: exchange)


class FlakyStore:
    """A write function that fails while ``down`` (or for the next ``fail_next`` calls)."""

    def __init__(self, fail_next: int = 0) -> None:
        self.fail_next = fail_next
        self.down = False
        self.batches: list[list[str]] = []
        self.attempts = 0
        self.lock = threading.Lock()

    def __call__(self, exchanges: list[Exchange]) -> None:
        with self.lock:
            self.attempts += 1
            if self.down or self.fail_next > 0:
                self.fail_next = max(0, self.fail_next - 1)
                raise ConnectionError("store unavailable")
            self.batches.append([e.id for e in exchanges])

    @property
    def written(self) -> list[str]:
        return [i for batch in self.batches for i in batch]


def fast_writer(store, **kwargs) -> CaptureWriter:
    kwargs.setdefault("retry_initial", 0.001)
    kwargs.setdefault("retry_max", 0.005)
    return CaptureWriter(store, **kwargs)


def store_errors(caplog) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "memtap.capture.writer"
        and r.levelno == logging.ERROR
        and "could not store" in r.getMessage()
    ]


def gated(store: FlakyStore, gate: threading.Event):
    """A write function that waits for ``gate`` before writing to ``store``."""

    def write(exchanges: list[Exchange]) -> None:
        gate.wait(5)
        store(exchanges)

    return write


def test_writes_in_batches_and_flush_returns_true():
    gate = threading.Event()
    store = FlakyStore()
    writer = fast_writer(gated(store, gate), batch_size=4)
    for i in range(10):
        writer.submit(captured(i))
    gate.set()

    assert writer.flush(5) is True
    assert store.written == [f"ex{i:03d}" for i in range(10)]
    assert all(1 <= len(batch) <= 4 for batch in store.batches)
    assert any(len(batch) > 1 for batch in store.batches)
    assert writer.stats.written == 10
    assert writer.stats.captured == 10
    writer.close()


def test_on_written_callbacks_see_every_batch():
    store = FlakyStore()
    writer = fast_writer(store)
    seen: list[str] = []
    writer.on_written.append(lambda batch: seen.extend(e.id for e in batch))
    writer.on_written.insert(0, lambda batch: 1 / 0)
    for i in range(5):
        writer.submit(captured(i))
    assert writer.flush(5)
    assert seen == store.written == [f"ex{i:03d}" for i in range(5)]
    writer.close()


def test_failed_writes_are_retried_without_loss_or_duplicates(caplog):
    store = FlakyStore(fail_next=3)
    writer = fast_writer(store)
    with caplog.at_level(logging.WARNING, logger="memtap.capture.writer"):
        for i in range(20):
            writer.submit(captured(i))
        assert writer.flush(5) is True

    assert sorted(store.written) == [f"ex{i:03d}" for i in range(20)]
    assert len(store.written) == len(set(store.written))
    assert writer.stats.write_failures == 3
    assert len(store_errors(caplog)) == 1
    assert any("storage is back" in r.getMessage() for r in caplog.records)
    writer.close()


def test_each_outage_is_logged_once(caplog):
    store = FlakyStore(fail_next=4)
    writer = fast_writer(store)
    with caplog.at_level(logging.ERROR, logger="memtap.capture.writer"):
        writer.submit(captured(0))
        assert writer.flush(5)
        store.fail_next = 4
        writer.submit(captured(1))
        assert writer.flush(5)
    assert len(store_errors(caplog)) == 2
    assert store.written == ["ex000", "ex001"]
    writer.close()


def test_flush_times_out_while_store_is_down_then_succeeds():
    store = FlakyStore()
    store.down = True
    writer = fast_writer(store)
    writer.submit(captured(1))
    writer.submit(captured(2))

    started = time.monotonic()
    assert writer.flush(0.2) is False
    assert time.monotonic() - started < slack(2)
    assert store.written == []
    assert store.attempts >= 1

    store.down = False
    assert writer.flush(5) is True
    assert store.written == ["ex001", "ex002"]
    writer.close()


def test_bounded_buffer_drops_oldest_with_a_counted_warning(caplog):
    release = threading.Event()
    store = FlakyStore()
    store.down = True

    def write(exchanges: list[Exchange]) -> None:
        release.wait(5)
        store(exchanges)

    writer = fast_writer(write, max_buffered=3)
    with caplog.at_level(logging.WARNING, logger="memtap.capture.writer"):
        for i in range(6):
            writer.submit(captured(i))
        release.set()
        assert writer.flush(0.2) is False
        store.down = False
        assert writer.flush(5) is True

    assert store.written == ["ex003", "ex004", "ex005"]
    assert writer.stats.dropped == 3
    drops = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 1
    assert drops[0].levelno == logging.WARNING
    assert "3 oldest" in drops[0].getMessage()
    writer.close()


def test_captured_call_formats_once_across_threads():
    calls = []
    exchange = make_exchange(1)

    def build() -> Exchange:
        calls.append(threading.get_ident())
        time.sleep(0.05)
        return exchange

    item = CapturedCall(build)
    barrier = threading.Barrier(2)
    results: list[Exchange | None] = []

    def ask() -> None:
        barrier.wait()
        results.append(item.exchange())

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(calls) == 1
    assert results == [exchange, exchange]
    assert item.exchange() is exchange
    assert len(calls) == 1


def test_captured_call_build_returning_none_is_not_repeated():
    calls = []

    def build() -> None:
        calls.append(1)
        return None

    item = CapturedCall(build)
    assert item.exchange() is None
    assert item.exchange() is None
    assert calls == [1]


def test_captured_call_build_error_is_logged_not_raised(caplog):
    calls = []

    def build() -> Exchange:
        calls.append(1)
        raise KeyError("missing field")

    item = CapturedCall(build)
    with caplog.at_level(logging.ERROR, logger="memtap.capture.writer"):
        assert item.exchange() is None
        assert item.exchange() is None
    assert calls == [1]
    assert [r.levelno for r in caplog.records if r.name == "memtap.capture.writer"] == [logging.ERROR]


def test_writer_counts_unformatted_calls_and_keeps_going(caplog):
    store = FlakyStore()
    writer = fast_writer(store)

    def broken() -> Exchange:
        raise ValueError("cannot format")

    with caplog.at_level(logging.ERROR, logger="memtap.capture.writer"):
        writer.submit(captured(1))
        writer.submit(CapturedCall(broken))
        writer.submit(captured(2))
        assert writer.flush(5) is True

    assert store.written == ["ex001", "ex002"]
    assert writer.stats.unformatted == 1
    assert writer.stats.written == 2
    assert any("could not format" in r.getMessage() for r in caplog.records)
    writer.close()


def test_close_flushes_stops_the_thread_and_rejects_new_calls(caplog):
    before = set(threading.enumerate())
    store = FlakyStore()
    writer = fast_writer(store)
    writer.submit(captured(1))

    assert writer.close() is True
    assert store.written == ["ex001"]
    new_writers = [t for t in threading.enumerate() if t not in before and t.name == "memtap-writer"]
    assert new_writers == []

    with caplog.at_level(logging.WARNING, logger="memtap.capture.writer"):
        writer.submit(captured(2))
    assert any("closed" in r.getMessage() for r in caplog.records)
    assert writer.flush(0.5) is True
    assert store.written == ["ex001"]


def test_close_while_store_is_down_reports_what_was_not_stored(caplog):
    store = FlakyStore()
    store.down = True
    writer = fast_writer(store)
    writer.submit(captured(1))
    writer.submit(captured(2))
    with caplog.at_level(logging.WARNING, logger="memtap.capture.writer"):
        assert writer.close(timeout=0.2) is False
    assert any("2 captured call(s) not stored" in r.getMessage() for r in caplog.records)
    assert store.written == []


def test_close_without_any_submission():
    writer = fast_writer(FlakyStore())
    assert writer.close() is True


@pytest.mark.parametrize("n", [1, 300])
def test_everything_submitted_is_written_exactly_once(n):
    store = FlakyStore()
    writer = fast_writer(store, batch_size=64)
    for i in range(n):
        writer.submit(captured(i))
    assert writer.flush(5)
    assert store.written == [f"ex{i:03d}" for i in range(n)]
    writer.close()


def test_without_formatting_ahead_calls_are_taken_in_one_batch_per_linger():
    """Calls that arrive formatted (the proxy formats in the caller) do not wake the writer
    one by one: it lingers, then writes what came in one batch; a flush cuts the linger."""
    store = FlakyStore()
    linger = slack(2.0)  # far longer than the test takes to submit: it is still lingering below
    writer = fast_writer(store, linger=linger)
    writer.format_in_caller = True
    formatted: list[int] = []

    def item(i: int) -> CapturedCall:
        exchange = make_exchange(i)
        return CapturedCall(lambda: formatted.append(i) or exchange)

    for i in range(5):
        writer.submit(item(i))
        time.sleep(0.01)
    time.sleep(0.1)
    assert store.batches == []  # still lingering after the first call
    assert formatted == []  # and nothing was formatted ahead of the write
    started = time.monotonic()
    assert writer.flush(5)
    assert time.monotonic() - started < linger / 4  # the flush did not wait out the linger
    assert store.batches == [[f"ex{i:03d}" for i in range(5)]]
    writer.close()


def test_without_formatting_ahead_a_backlog_is_written_without_lingering():
    gate = threading.Event()
    store = FlakyStore()
    writing = threading.Event()
    linger = slack(0.3)

    def write(exchanges: list[Exchange]) -> None:
        writing.set()
        gated(store, gate)(exchanges)

    writer = fast_writer(write, linger=linger, batch_size=10)
    writer.format_in_caller = True
    writer.submit(captured(0))
    assert writing.wait(slack(5))  # lingered, now writing the first batch (held at the gate)
    for i in range(1, 31):
        writer.submit(captured(i))
    started = time.monotonic()
    gate.set()
    eventually(lambda: writer.stats.written >= 31)
    assert time.monotonic() - started < linger * 0.8  # not 3 lingers (not even one)
    assert [len(batch) for batch in store.batches] == [1, 10, 10, 10]
    writer.close()


def test_under_sustained_load_the_writer_lingers_long_enough_to_amortise_its_writes():
    """A store whose every write has a fixed cost (DuckDB: ~14 ms a transaction, whatever it
    holds) is written in larger batches while calls keep coming: the writer lingers at least
    :attr:`CaptureWriter.AMORTISE` times as long as its last write took (up to
    ``max_linger``), so that the fixed costs stay a small part of its time (issue 37)."""
    store = FlakyStore()
    sizes: list[int] = []

    def write(exchanges: list[Exchange]) -> None:
        sizes.append(len(exchanges))
        time.sleep(0.03)  # the fixed cost of a write
        store(exchanges)

    writer = fast_writer(write, linger=0.02, max_linger=slack(0.6), batch_size=1000)
    n = 0
    started = time.monotonic()
    while time.monotonic() - started < slack(1.5):
        writer.submit(captured(n))
        n += 1
        time.sleep(0.002)
    assert writer.flush(slack(5))
    assert store.written == [f"ex{i:03d}" for i in range(n)]
    # With only the 20 ms linger, a batch holds what came during a linger and a write
    # (~25 calls); lingering 10 x 30 ms, several times that.
    assert max(sizes) > 2.5 * (0.05 / 0.002), sizes
    writer.close()


def test_a_lone_call_after_a_quiet_spell_is_written_after_the_short_linger():
    """The longer linger is for calls that keep coming: a call alone (the batch before it
    held one call too) is written after ``linger``, not ``max_linger``."""
    store = FlakyStore()

    def write(exchanges: list[Exchange]) -> None:
        time.sleep(0.03)
        store(exchanges)

    writer = fast_writer(write, linger=0.02, max_linger=slack(3.0))
    writer.submit(captured(0))
    assert eventually(lambda: store.written == ["ex000"], slack(2))
    started = time.monotonic()
    writer.submit(captured(1))
    assert eventually(lambda: store.written == ["ex000", "ex001"], slack(2))
    assert time.monotonic() - started < slack(1.0)
    writer.close()
