"""``SessionHistories.latest``: a cached session is read again when the store's latest
exchange of it is one this process does not know (another process served its last turn),
and a store too slow to say so slows one call, not every call."""

from __future__ import annotations

import asyncio
import threading
import time

from memtap.history.injector import CATCH_UP_DEADLINE, SessionHistories
from memtap.sdk import Attribution, Message

SESSION = Attribution(entity_id="e", session_id="s")


def turn(exchange_id: str, text: str) -> list[Message]:
    return [
        Message(role="user", content=text, exchange_id=exchange_id),
        Message(role="assistant", content="ok", exchange_id=exchange_id),
    ]


class Store:
    """A session's stored messages, written by "other processes" in the test."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.asked = 0
        self.gate = threading.Event()
        self.gate.set()

    def load(self, attribution: Attribution, limit: int) -> list[Message]:
        return list(self.messages[-limit:])

    def latest(self, attribution: Attribution) -> str | None:
        self.asked += 1
        self.gate.wait(10)
        return self.messages[-1].exchange_id if self.messages else None


def texts(histories: SessionHistories) -> list[str]:
    return [m.content for m in histories.get(SESSION) if m.role == "user"]


def test_a_turn_another_process_stored_is_read_before_the_next_call() -> None:
    store = Store()
    histories = SessionHistories(store.load)
    histories.latest = store.latest
    try:
        store.messages += turn("x1", "first, elsewhere")
        asyncio.run(histories.preload(SESSION))
        assert texts(histories) == ["first, elsewhere"]
        # This process serves the next turn: it knows it, nothing is read again.
        histories.append(SESSION, lambda: turn("x2", "second, here"), "x2")
        store.messages += turn("x2", "second, here")
        asyncio.run(histories.preload(SESSION))
        assert texts(histories) == ["first, elsewhere", "second, here"]
        # Another process serves the third: the cache is behind, the store says so.
        store.messages += turn("x3", "third, elsewhere")
        asyncio.run(histories.preload(SESSION))
        assert texts(histories) == ["first, elsewhere", "second, here", "third, elsewhere"]
    finally:
        histories.close()


def test_without_latest_the_cache_is_trusted() -> None:
    store = Store()
    histories = SessionHistories(store.load)
    try:
        asyncio.run(histories.preload(SESSION))
        store.messages += turn("x1", "elsewhere")
        asyncio.run(histories.preload(SESSION))
        assert texts(histories) == [] and store.asked == 0
    finally:
        histories.close()


def test_a_store_late_to_answer_slows_one_call_not_every_call() -> None:
    store = Store()
    histories = SessionHistories(store.load)
    histories.latest = store.latest
    try:
        asyncio.run(histories.preload(SESSION))
        store.gate.clear()  # the store stops answering
        started = time.monotonic()
        asyncio.run(histories.preload(SESSION))
        first = time.monotonic() - started
        assert CATCH_UP_DEADLINE <= first < CATCH_UP_DEADLINE + 1.0
        assert histories.store_late
        asked = store.asked
        started = time.monotonic()
        for _ in range(5):
            asyncio.run(histories.preload(SESSION))
        assert time.monotonic() - started < CATCH_UP_DEADLINE  # not asked, not waited for
        assert store.asked == asked
        store.gate.set()  # it answers again: calls ask again
        deadline = time.monotonic() + 5
        while histories.store_late:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        asyncio.run(histories.preload(SESSION))
        assert store.asked == asked + 1
    finally:
        store.gate.set()
        histories.close()


def test_a_first_read_later_than_its_deadline_is_said_once_a_minute(caplog) -> None:
    """A session read too slowly goes on without its earlier turns (fail open); on a store
    other processes write to, those may be turns another process served: it is logged."""
    store = Store()
    slow = threading.Event()

    def load(attribution: Attribution, limit: int) -> list[Message]:
        slow.wait(10)
        return store.load(attribution, limit)

    histories = SessionHistories(load, deadline=0.05)
    histories.latest = store.latest
    try:
        with caplog.at_level("WARNING", logger="memtap.history.injector"):
            asyncio.run(histories.preload(SESSION))
            asyncio.run(histories.preload(Attribution(entity_id="e", session_id="other")))
        late = [r.getMessage() for r in caplog.records if "was not read within" in r.getMessage()]
        assert len(late) == 1 and "'s'" in late[0]
    finally:
        slow.set()
        histories.close()
