"""Loading session histories from the store: a new session costs no store read on the
request path, a known session is read once, a read that hangs holds a call up at most the
deadline (an event loop not at all), and a session another process created reaches this
process's next call. Real openai SDK against the scripted server; the store is core's
in-memory one, wrapped to record and hold its reads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

import openai
import pytest

import memtap
import memtap_openai
from memtap.history import known_sessions
from memtap.history.known_sessions import KnownSessions
from memtap.protocol.model import Message
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer
from memtap.testing.storage_suite import make_exchange
from memtap.testing.timing import slack

KEY = "sk-test-0123456789abcdefghijklmn"


class RecordingStore(InMemoryStore):
    """A store other processes write to as well (like PostgreSQL): records every history
    read (session, thread); ``hold`` makes reads hang until ``release`` is set (a frozen
    database). ``exclusive=True`` makes it a store only this process writes (like a DuckDB
    file), which reports every session written through ``watch_sessions``."""

    def __init__(self, *, exclusive: bool = False) -> None:
        super().__init__()
        if not exclusive:
            del self.watch_sessions
        self.reads: list[tuple[str, str]] = []
        self.hold = threading.Event()
        self.release = threading.Event()

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        self.reads.append((session_id, threading.current_thread().name))
        if self.hold.is_set():
            self.release.wait(30)
        return super().history(session_id, entity_id=entity_id, limit=limit)


class NoSessionKeys:
    """A third-party store that cannot list its sessions."""

    def __init__(self, inner: RecordingStore) -> None:
        self.inner = inner
        self.url = inner.url

    def __getattr__(self, name: str) -> Any:
        if name == "session_keys":
            raise AttributeError(name)
        return getattr(self.inner, name)


def _memory(store: Any, server: ScriptedModelServer) -> tuple[memtap.Memory, openai.OpenAI]:
    """A Memory on ``store`` once it has listed the store's sessions, and a registered client."""
    mem = memtap.Memory(store, plugins=[memtap_openai], entry_points=False, embedder=False)
    deadline = time.monotonic() + 10
    while not mem.known_sessions.ready and getattr(store, "session_keys", None) is not None:
        assert time.monotonic() < deadline, "the store's sessions were never listed"
        time.sleep(0.01)
    return mem, mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0))


def _seed(store: InMemoryStore, session: str, text: str) -> None:
    """A session written by another process (straight into the shared store)."""
    store.write_exchanges(
        [make_exchange(time.time() % 1000, entity_id="e", session_id=session, input=(Message("user", text),))]
    )


def _ask(mem: memtap.Memory, client: openai.OpenAI, server: ScriptedModelServer, session: str) -> list[str]:
    with mem.scope(entity_id="e", session_id=session):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"hi {session}"}])
    return [m["content"] for m in server.last_json()["messages"]]


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def test_a_new_session_costs_no_store_read_on_the_request_path(server: ScriptedModelServer) -> None:
    store = RecordingStore()
    mem, client = _memory(store, server)
    _ask(mem, client, server, "warm-up")  # the SDK's first call is slow on its own
    mem.histories.deadline = 5.0
    store.hold.set()  # were a call to wait for its read, it would wait the whole deadline
    try:
        times = [_timed(_ask, mem, client, server, f"new-{i}")[0] for i in range(5)]
    finally:
        store.release.set()
    assert max(times) < 2.5, times
    assert all(thread.startswith("memtap-history") for _, thread in store.reads), store.reads
    mem.close()


def test_a_known_session_is_read_once_and_its_first_call_carries_it(server: ScriptedModelServer) -> None:
    store = RecordingStore()
    _seed(store, "known", "my locker code is 4711")
    mem, client = _memory(store, server)
    sent = [_ask(mem, client, server, "known") for _ in range(5)]
    assert "my locker code is 4711" in sent[0]
    assert [s for s, _ in store.reads].count("known") == 1
    mem.close()


def test_a_session_another_process_created_reaches_the_next_call(server: ScriptedModelServer) -> None:
    store = RecordingStore()
    mem, client = _memory(store, server)  # lists the store's sessions now: "later" is not among them
    _seed(store, "later", "I moved to Lisbon")
    _ask(mem, client, server, "later")  # may go without it: the session looked new
    deadline = time.monotonic() + 5
    while not mem.histories.get(memtap.protocol.model.Attribution(entity_id="e", session_id="later")):
        assert time.monotonic() < deadline, "the background read never filled the session"
        time.sleep(0.01)
    assert "I moved to Lisbon" in _ask(mem, client, server, "later")
    mem.close()


def test_a_new_session_on_a_store_only_this_process_writes_is_never_read(server: ScriptedModelServer) -> None:
    store = RecordingStore(exclusive=True)
    _seed(store, "known", "my locker code is 4711")
    mem, client = _memory(store, server)
    for i in range(3):
        _ask(mem, client, server, f"new-{i}")
        _ask(mem, client, server, f"new-{i}")  # its second call has its first, from memory
    assert "hi new-0" in _ask(mem, client, server, "new-0")
    assert "my locker code is 4711" in _ask(mem, client, server, "known")
    assert [s for s, _ in store.reads] == ["known"]
    _seed(store, "imported", "I moved to Lisbon")  # written by other code in this process
    assert "I moved to Lisbon" in _ask(mem, client, server, "imported")
    mem.close()


def test_a_hung_read_holds_the_first_call_up_at_most_the_deadline(server: ScriptedModelServer) -> None:
    store = RecordingStore()
    _seed(store, "known", "my locker code is 4711")
    mem, client = _memory(store, server)
    store.hold.set()
    try:
        first, sent = _timed(_ask, mem, client, server, "known")
        second, _ = _timed(_ask, mem, client, server, "known")
    finally:
        store.release.set()
    deadline = mem.histories.deadline
    assert deadline <= first < deadline + 0.5
    assert "my locker code is 4711" not in sent
    assert second < deadline / 2  # the read is not waited for twice
    wait_until = time.monotonic() + 5
    while "my locker code is 4711" not in _ask(mem, client, server, "known"):
        assert time.monotonic() < wait_until, "the finished read never served a later call"
    mem.close()


def test_a_store_that_cannot_list_its_sessions_waits_at_most_the_deadline(
    server: ScriptedModelServer,
) -> None:
    inner = RecordingStore()
    mem, client = _memory(NoSessionKeys(inner), server)
    inner.hold.set()
    try:
        elapsed, _ = _timed(_ask, mem, client, server, "new")
    finally:
        inner.release.set()
    assert elapsed < mem.histories.deadline + slack(0.5)
    mem.close()


def test_an_async_client_never_blocks_its_event_loop_on_a_read(server: ScriptedModelServer) -> None:
    store = RecordingStore()
    _seed(store, "known", "my locker code is 4711")
    mem, _ = _memory(store, server)
    mem.histories.deadline = 1.0
    client = mem.register(openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0))

    async def scenario() -> tuple[float, float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        async def call() -> float:
            started = time.perf_counter()
            with mem.scope(entity_id="e", session_id="known"):
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            done.set()
            return time.perf_counter() - started

        tick = asyncio.create_task(ticker())
        elapsed = await call()
        await tick
        await client.close()
        return elapsed, max(gaps)

    store.hold.set()
    try:
        elapsed, worst_gap = asyncio.run(scenario())
    finally:
        store.release.set()
    assert 1.0 <= elapsed < 1.0 + slack(0.5)  # the call waited for its history, a bounded time
    assert worst_gap < slack(0.2)  # ... without blocking the loop meanwhile (1 s if it did)
    mem.close()


# -- KnownSessions ------------------------------------------------------------------------


def test_known_sessions_answer_none_until_listed_then_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = threading.Event()
    stored: Sequence[tuple[str, str]] = [("e", "a"), ("e", "b")]

    def read() -> Sequence[tuple[str, str]]:
        listed.wait(5)
        return stored

    known = KnownSessions(read)
    known.start()
    assert known.knows(("e", "a")) is None
    known.add(("e", "mine"))
    assert known.knows(("e", "mine")) is True
    listed.set()
    deadline = time.monotonic() + 5
    while not known.ready:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert known.knows(("e", "a")) is True
    assert known.knows(("e", "c")) is False
    assert known.knows(("other", "a")) is False
    assert known.knows(("e", "mine")) is True


def test_known_sessions_merge_what_this_process_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(known_sessions, "MERGE_BATCH", 8)
    known = KnownSessions(lambda: [("e", f"stored-{i}") for i in range(20)])
    known.start()
    deadline = time.monotonic() + 5
    while not known.ready:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for i in range(100):
        known.add(("e", f"added-{i}"))
    while len(known._added) >= 8:  # merged in the background
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert all(known.knows(("e", f"added-{i}")) for i in range(100))
    assert all(known.knows(("e", f"stored-{i}")) for i in range(20))
    assert known.knows(("e", "never")) is False
    for _ in range(3):  # every call of a known session says so again: nothing new to merge
        for i in range(100):
            known.add(("e", f"added-{i}"))
        for i in range(20):
            known.add(("e", f"stored-{i}"))
    assert len(known._added) < 8


def test_known_sessions_of_a_store_that_cannot_list_are_never_ready() -> None:
    known = KnownSessions(None)
    known.start()
    assert known.knows(("e", "a")) is None
    known.add(("e", "a"))
    assert known.knows(("e", "a")) is True
