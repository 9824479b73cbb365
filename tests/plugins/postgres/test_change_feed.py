"""The change feed on PostgreSQL (#19): what one process writes, every other process's
caches follow within the documented delay (2 s here, milliseconds in practice): recall
indexes, session histories, forgets. Two real processes (tests/plugins/postgres/feed_peer.py)
on the local server; the feed's connection killed by the server and recovered."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memtap.storage.changes import EVERYTHING, StoreChange
from memtap.testing.timing import eventually

PEER = Path(__file__).with_name("feed_peer.py")
#: The delay the docs promise (docs/quickstart.md, "PostgreSQL"): what a test allows.
FEED_DELAY = 2.0


class Peer:
    """A feed_peer.py process."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER), url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.read() == {"ready": True}

    def send(self, op: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"peer exited with {self.proc.wait(5)}"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def ask(self, op: str, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def peers(pg_url: str) -> Iterator[Callable[[], Peer]]:
    made: list[Peer] = []

    def make() -> Peer:
        made.append(Peer(pg_url))
        return made[-1]

    yield make
    for peer in made:
        peer.close()


def observed(watcher: Peer, writer: Peer, wait_op: str, write_op: str, **args: Any) -> float:
    """Seconds from ``writer``'s ``write_op`` returning to ``watcher`` seeing its effect
    (``wait_op`` polls its request path from before the write)."""
    watch_args = {k: v for k, v in args.items() if k != "write"}
    watcher.send(wait_op, timeout=FEED_DELAY + 5, **watch_args)
    done = writer.ask(write_op, **args["write"])
    seen = watcher.read()["seen_at"]
    assert seen is not None, f"{wait_op} {watch_args} never happened"
    return float(seen - done["done_at"])


def test_a_fact_remembered_in_one_process_is_recalled_by_another(peers: Callable[[], Peer]) -> None:
    a, b = peers(), peers()
    query = "where does alice live?"
    assert b.ask("remember", text="Alice works as a pilot", entity="alice")
    assert a.ask("recall", query=query, entity="alice")["texts"] == ["Alice works as a pilot"]  # cached
    delay = observed(
        a, b, "wait_recall", "remember",
        query=query, entity="alice", text="Alice lives in Tokyo", present=True,
        write={"text": "Alice lives in Tokyo", "entity": "alice"},
    )  # fmt: skip
    assert delay < FEED_DELAY
    # ... and a forget in one is honoured by the other.
    delay = observed(
        a, b, "wait_recall", "forget",
        query=query, entity="alice", text="Alice lives in Tokyo", present=False,
        write={"entity": "alice"},
    )  # fmt: skip
    assert delay < FEED_DELAY
    assert a.ask("recall", query=query, entity="alice")["texts"] == []


def test_a_forget_reaches_a_process_that_keeps_recalling(peers: Callable[[], Peer]) -> None:
    """The other way round: the process that remembered recalls it, another forgets."""
    a, b = peers(), peers()
    a.ask("remember", text="Bob's locker code is 4711", entity="bob")
    assert a.ask("recall", query="locker code", entity="bob")["texts"] == ["Bob's locker code is 4711"]
    delay = observed(
        a, b, "wait_recall", "forget",
        query="locker code", entity="bob", text="Bob's locker code is 4711", present=False,
        write={"entity": "bob"},
    )  # fmt: skip
    assert delay < FEED_DELAY


def test_a_captured_turn_reaches_the_other_process_history(peers: Callable[[], Peer]) -> None:
    a, b = peers(), peers()
    b.ask("capture", text="first turn", entity="carol", session="s1")
    assert a.ask("history", entity="carol", session="s1")["texts"] == ["first turn", "noted"]  # cached
    delay = observed(
        a, b, "wait_history", "capture",
        entity="carol", session="s1", text="second turn", present=True,
        write={"text": "second turn", "entity": "carol", "session": "s1"},
    )  # fmt: skip
    assert delay < FEED_DELAY
    texts = a.ask("history", entity="carol", session="s1")["texts"]
    assert texts == ["first turn", "noted", "second turn", "noted"]
    delay = observed(
        a, b, "wait_history", "forget",
        entity="carol", session="s1", text="first turn", present=False,
        write={"entity": "carol"},
    )  # fmt: skip
    assert delay < FEED_DELAY


def test_a_context_completed_in_one_process_is_recalled_by_another(peers: Callable[[], Peer]) -> None:
    """One process's next exchange completes an earlier episode's context: the other
    process's cached index takes the new context in (a word only the following turn says
    finds the episode) within the feed's delay."""
    a, b = peers(), peers()
    booked = "We finally booked the flights yesterday"
    b.ask("capture", text=booked, entity="dora", session="s1")
    assert a.ask("recall", query="booked flights", entity="dora")["texts"] == [booked]  # cached
    assert a.ask("recall", query="lisbon", entity="dora")["texts"] == []
    delay = observed(
        a, b, "wait_recall", "capture",
        query="lisbon", entity="dora", text=booked, present=True,
        write={"text": "Lisbon, in June", "entity": "dora", "session": "s1"},
    )  # fmt: skip
    assert delay < FEED_DELAY


def test_the_feed_recovers_when_its_connection_is_killed(peers: Callable[[], Peer], pg_server: str) -> None:
    import psycopg

    a, b = peers(), peers()
    a.ask("remember", text="Dana plays the cello", entity="dana")
    assert a.ask("recall", query="what does dana play", entity="dana")["texts"]
    before = a.ask("feed")
    with psycopg.connect(pg_server, autocommit=True) as conn:
        killed = conn.execute("SELECT pg_terminate_backend(%s)", [before["pid"]]).fetchone()
    assert killed == (True,)
    # Written while the feed may be down: the reconnection reports everything changed.
    delay = observed(
        a, b, "wait_recall", "remember",
        query="what does dana play", entity="dana", text="Dana plays the violin", present=True,
        write={"text": "Dana plays the violin", "entity": "dana"},
    )  # fmt: skip
    assert delay < FEED_DELAY
    after = a.ask("feed")
    assert after["listening"] and after["connections"] == before["connections"] + 1
    assert after["pid"] != before["pid"]
    # ... and it hears single changes again.
    delay = observed(
        a, b, "wait_recall", "forget",
        query="what does dana play", entity="dana", text="Dana plays the violin", present=False,
        write={"entity": "dana"},
    )  # fmt: skip
    assert delay < FEED_DELAY


# -- in one process: the store's feed itself ---------------------------------------------


def _heard(store: Any) -> list[StoreChange]:
    heard: list[StoreChange] = []
    store.watch_changes(heard.append)
    assert store.feed.listening.wait(10)
    return heard


def test_stores_in_other_schemas_are_not_told(pg_schema_url: Callable[[], str]) -> None:
    from memtap.testing.storage_suite import make_fact
    from memtap_postgres.store import PostgresStore

    here, elsewhere = PostgresStore(pg_schema_url()), PostgresStore(pg_schema_url())
    try:
        assert here.channel != elsewhere.channel
        heard = _heard(here)
        elsewhere.add_facts([make_fact(1, entity_id="e1")])
        time.sleep(0.3)
        assert StoreChange(entity_id="e1", facts=True) not in heard
    finally:
        here.close()
        elsewhere.close()


def test_a_rolled_back_write_tells_nobody(pg_url: str, pg_server: str) -> None:
    """Notifications go with the transaction: a write that fails notifies nothing."""
    import psycopg

    from memtap_postgres.feed import notify
    from memtap_postgres.store import PostgresStore

    store, other = PostgresStore(pg_url), PostgresStore(pg_url)
    try:
        heard = _heard(store)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            with pytest.raises(ZeroDivisionError), conn.transaction():
                notify(conn, store.channel, "someone", [StoreChange(entity_id="e1", facts=True)])
                raise ZeroDivisionError
            notify(conn, store.channel, "someone", [StoreChange(entity_id="e2", facts=True)])
        assert eventually(lambda: StoreChange(entity_id="e2", facts=True) in heard)
        assert StoreChange(entity_id="e1", facts=True) not in heard
    finally:
        store.close()
        other.close()


def test_payloads_stay_under_the_server_limit() -> None:
    """Many changes are split over notifications, each under PostgreSQL's 8000 bytes; one
    change too long for any is sent as "everything changed"."""
    from memtap_postgres.feed import PAYLOAD_LIMIT, parse, payloads

    changes = [StoreChange(entity_id=f"entity-{i:05d}", session_id=f"session-{i}") for i in range(2000)]
    changes.append(StoreChange(entity_id="x" * 9000, facts=True))
    sent = payloads("me", changes)
    assert len(sent) > 1 and all(len(p.encode()) <= PAYLOAD_LIMIT for p in sent)
    got = [c for p in sent for c in parse(p, "someone else")]
    assert got == [*changes[:-1], EVERYTHING]
    # One write's new facts of an entity, one item each, come back as one change.
    facts = [StoreChange(entity_id="e", facts=True, fact_ids=(f"fact-{i}",)) for i in range(3)]
    (one,) = payloads("me", [*facts, StoreChange(entity_id="f", facts=True)])
    assert parse(one, "you") == [
        StoreChange(entity_id="e", facts=True, fact_ids=("fact-0", "fact-1", "fact-2")),
        StoreChange(entity_id="f", facts=True),
    ]
    assert [c for p in sent for c in parse(p, "me")] == []  # its own
    assert parse("not json", "me") == [EVERYTHING]


def test_new_facts_are_read_by_id(pg_url: str) -> None:
    """What a process reads of another's new facts: those ids, current ones, with vectors."""
    from memtap.testing.storage_suite import make_fact
    from memtap_postgres.store import PostgresStore

    store = PostgresStore(pg_url)
    try:
        first, second, other = make_fact(1), make_fact(2), make_fact(3)
        store.add_facts([first, second, other])
        store.set_embeddings({second.id: [0.5, 0.5]}, model="m")
        newer = make_fact(4, supersedes=first.id)
        store.add_facts([newer])
        rows = store.indexable_facts_by_id(entity_id="alice", ids=[first.id, second.id, newer.id], model="m")
        assert [(f.id, None if v is None else list(v)) for f, v in rows] == [
            (second.id, [0.5, 0.5]),
            (newer.id, None),
        ]
        assert store.indexable_facts_by_id(entity_id="bob", ids=[second.id], model="m") == []
    finally:
        store.close()
