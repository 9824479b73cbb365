"""A store that stops answering never holds up a call: PostgreSQL behind a loopback TCP
forwarder that fails in each way a network does (refused, frozen after connect, frozen
mid-query, slow, reset), in-process with the real openai SDK and through the proxy.

Each test: a Memory opened on the forwarded store, a cached session, a session stored by
another process that this one has not read, then the fault; calls on new, uncached and
cached sessions must return within the upstream's time + 1 s (in-process) and, through the
proxy, requests of other sessions must not wait for the stuck one at all. After the fault,
nothing captured meanwhile is lost and the uncached session's history reaches a later call.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
import psycopg
import pytest
from reliability_support import API_KEY, pg_base_url, with_schema

import memtap
import memtap_openai
import memtap_postgres
from memtap.protocol.model import Message
from memtap.testing.server import ScriptedModelServer
from memtap.testing.tcpfaults import TcpForwarder
from memtap.testing.timing import slack

FAULTS = ["refused", "frozen", "frozen_mid_query", "slow", "reset"]
#: What a call may take beyond the upstream's own time while the store fails (a call that
#: waited for the store would hang until the test heals the fault).
SLACK = slack(1.0)
ENTITY = "frozen-e"


@pytest.fixture
def forwarded() -> Iterator[tuple[TcpForwarder, str, str]]:
    """A forwarder to the test PostgreSQL server, the store URL through it (a new schema)
    and the same store's direct URL."""
    base = pg_base_url()
    parts = urlsplit(base)
    schema = f"memtap_frozen_{uuid.uuid4().hex[:12]}"
    with TcpForwarder(parts.port or 5432, parts.hostname or "127.0.0.1") as fwd:
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{fwd.port}"
        through = urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))
        yield fwd, with_schema(through, schema), with_schema(base, schema)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _memory(url: str, tmp_path: Any) -> memtap.Memory:
    return memtap.Memory(
        url, plugins=[memtap_openai, memtap_postgres], entry_points=False, spool=tmp_path / "spool"
    )


def _seed_known_session(direct_url: str, tmp_path: Any) -> None:
    """Another process's session: stored, never read by the Memory under test."""
    with memtap.Memory(direct_url, plugins=[memtap_postgres], entry_points=False, spool=False) as other:
        other.capture(
            [Message("user", "my locker code is 4711")],
            [Message("assistant", "noted")],
            entity_id=ENTITY,
            session_id="known",
        )
        assert other.flush(30)


def _within(limit: float, fn: Callable[[], Any], on_timeout: Callable[[], None]) -> float:
    """Run ``fn`` in a thread; its time, or fail (after ``on_timeout`` lets it finish)."""
    box: dict[str, Any] = {}

    def run() -> None:
        started = time.perf_counter()
        try:
            fn()
        except BaseException as exc:
            box["error"] = exc
        box["elapsed"] = time.perf_counter() - started

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        on_timeout()
        worker.join(120)
        pytest.fail(f"a call took longer than {limit:.2f} s while the store failed")
    if "error" in box:
        raise box["error"]
    return float(box["elapsed"])


def _upstream_time(client: openai.OpenAI) -> float:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ping"}])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _sent_texts(server: ScriptedModelServer) -> list[str]:
    body = server.last_json()
    return [m.get("content") for m in body["messages"] if isinstance(m.get("content"), str)]


def _eventually_carries_history(ask: Callable[[], None], server: ScriptedModelServer) -> None:
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        ask()
        if "my locker code is 4711" in _sent_texts(server):
            return
        time.sleep(0.5)
    pytest.fail("the uncached session's history never reached a call after the fault")


@pytest.mark.parametrize("kind", FAULTS)
def test_in_process_calls_return_while_the_store_fails(
    kind: str, forwarded: tuple[TcpForwarder, str, str], server: ScriptedModelServer, tmp_path: Any
) -> None:
    fwd, url, direct = forwarded
    _seed_known_session(direct, tmp_path)
    mem = _memory(url, tmp_path)
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))

    def ask(session: str, text: str, entity: str = ENTITY) -> Callable[[], None]:
        def call() -> None:
            with mem.scope(entity_id=entity, session_id=session):
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": text}]
                )
            assert reply.choices[0].message.content == f"You said: {text}"

        return call

    ask("cached", "hello")()
    assert mem.flush(30)
    upstream = _upstream_time(bare)
    try:
        with fwd.fault(kind):
            time.sleep(0.2)
            for i, session in enumerate(["new-1", "known", "cached", "new-2", "known", f"new-{kind}"]):
                elapsed = _within(upstream + SLACK, ask(session, f"during {i}"), fwd.heal)
                assert elapsed < upstream + SLACK
            # A new entity: its facts index must load too (in the background).
            elapsed = _within(upstream + SLACK, ask("s", "who am I?", "another-entity"), fwd.heal)
            assert elapsed < upstream + SLACK
        assert mem.flush(60), "calls captured during the fault were not stored after it"
        stored = {m.content for m in mem.store.history("new-1", entity_id=ENTITY)}
        assert "during 0" in stored
        _eventually_carries_history(ask("known", "what is my locker code?"), server)
    finally:
        fwd.heal()
        mem.close()


@pytest.mark.parametrize("kind", FAULTS)
def test_proxy_serves_other_sessions_while_the_store_fails(
    kind: str, forwarded: tuple[TcpForwarder, str, str], server: ScriptedModelServer, tmp_path: Any
) -> None:
    from memtap_proxy import Proxy, ProxyConfig, ProxyThread

    fwd, url, direct = forwarded
    _seed_known_session(direct, tmp_path)
    mem = _memory(url, tmp_path)
    config = ProxyConfig(openai_upstream=server.base_url, anthropic_upstream=server.base_url)
    thread = ProxyThread(Proxy(config, mem)).start()
    client = openai.OpenAI(base_url=thread.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)

    def ask(session: str, text: str) -> Callable[[], None]:
        def call() -> None:
            reply = client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": text}],
                extra_headers={"x-memtap-entity": ENTITY, "x-memtap-session": session},
            )
            assert reply.choices[0].message.content == f"You said: {text}"

        return call

    try:
        ask("cached", "hello")()
        assert mem.flush(30)
        through_proxy = []
        for i in range(5):
            started = time.perf_counter()
            ask("cached", f"warm {i}")()
            through_proxy.append(time.perf_counter() - started)
        usual = statistics.median(through_proxy)
        # The uncached session's request waits for its history, here up to 3 s: were that
        # wait on the event loop, every other request would wait with it.
        mem.histories.deadline = 3.0
        with fwd.fault(kind):
            time.sleep(0.2)
            stuck: dict[str, Any] = {}

            def known_session() -> None:
                try:
                    stuck["elapsed"] = _within(usual + 3.0 + SLACK, ask("known", "stuck?"), fwd.heal)
                except BaseException as exc:
                    stuck["error"] = exc

            waiting = threading.Thread(target=known_session)
            waiting.start()
            time.sleep(0.05)
            others = [
                _within(usual + SLACK, ask(session, f"other {i}"), fwd.heal)
                for i, session in enumerate(["cached", "new-a", "cached", "new-b", "cached", "new-c"] * 2)
            ]
            waiting.join(30)
            if "error" in stuck:
                raise stuck["error"]
            # Below the stuck session's 3 s wait, which they would share were it on the loop.
            assert max(others) < usual + slack(0.5), f"other sessions waited: {others}"
            assert statistics.median(others) < usual + slack(0.05), f"other sessions slowed: {others}"
        assert mem.flush(60)
        _eventually_carries_history(ask("known", "what is my locker code?"), server)
    finally:
        fwd.heal()
        thread.stop()
        mem.close()


@pytest.mark.parametrize("kind", ["frozen", "frozen_mid_query"])
def test_a_statement_on_a_frozen_connection_ends_at_its_deadline(
    kind: str, forwarded: tuple[TcpForwarder, str, str]
) -> None:
    """Without a client-side deadline a thread reading a frozen connection waits until the
    network heals (forever, for a paused server): the store cuts it, and recovers after."""
    from memtap.storage.store import StoreError
    from memtap_postgres.settings import WATCHDOG_GRACE
    from memtap_postgres.store import PostgresStore

    fwd, url, _ = forwarded
    store = PostgresStore(url + "&statement_timeout=0.5&connect_timeout=2")
    try:
        assert store.history("s") == []
        with fwd.fault(kind):
            started = time.monotonic()
            with pytest.raises(StoreError):
                _within(30, lambda: store.history("s"), fwd.heal)
            elapsed = time.monotonic() - started
            assert store._watchdog.cuts >= 1
            # The cut connection, one retry on another connection (a pooled one: cut at its
            # check; or a new one: the connect timeout), then the pool's wait for a connection.
            assert 0.5 + WATCHDOG_GRACE <= elapsed < 0.5 + WATCHDOG_GRACE + 2 + 5 + 3, elapsed
        assert store.history("s") == []  # broken connections were replaced
    finally:
        store.close()
