from __future__ import annotations

import logging
import threading

from conversation_support import assistant, conversation, user

from memtap.history.injector import SessionHistories
from memtap.protocol.model import Attribution, Message
from memtap.testing.timing import slack

# -- SessionHistories ---------------------------------------------------------------------


class CountingLoader:
    def __init__(self, stored: dict[tuple[str, str], list[Message]] | None = None) -> None:
        self.stored = stored or {}
        self.calls: list[tuple[str, str, int]] = []

    def __call__(self, attribution: Attribution, limit: int) -> list[Message]:
        self.calls.append((attribution.entity_id, attribution.session_id, limit))
        return list(self.stored.get((attribution.entity_id, attribution.session_id), []))


ALICE_S1 = Attribution(entity_id="alice", session_id="s1")
BOB_S1 = Attribution(entity_id="bob", session_id="s1")


def test_histories_load_once_per_entity_and_session():
    loader = CountingLoader({("alice", "s1"): conversation(1), ("bob", "s1"): [user("bob's")]})
    histories = SessionHistories(loader, max_messages=50)

    assert histories.get(ALICE_S1) == conversation(1)
    assert histories.get(ALICE_S1) == conversation(1)
    assert histories.get(Attribution(entity_id="alice", session_id="s1", process_id="bot")) == conversation(1)
    assert histories.get(BOB_S1) == [user("bob's")]
    assert histories.get(BOB_S1) == [user("bob's")]

    assert loader.calls == [("alice", "s1", 50), ("bob", "s1", 50)]


def test_histories_resolve_appended_calls_lazily_and_once():
    loader = CountingLoader({("alice", "s1"): conversation(1)})
    histories = SessionHistories(loader)
    histories.get(ALICE_S1)
    resolved = []

    def resolve() -> list[Message]:
        resolved.append(1)
        return [user("question 1"), assistant("answer 1")]

    histories.append(ALICE_S1, resolve)
    assert resolved == []
    assert histories.get(ALICE_S1) == conversation(2)
    assert histories.get(ALICE_S1) == conversation(2)
    assert resolved == [1]
    assert len(loader.calls) == 1


def test_histories_append_to_uncached_session_is_left_to_the_store():
    loader = CountingLoader({("alice", "s1"): conversation(2)})
    histories = SessionHistories(loader)
    resolved = []
    histories.append(ALICE_S1, lambda: resolved.append(1) or [user("never")])

    assert histories.get(ALICE_S1) == conversation(2)
    assert resolved == []


def test_histories_failing_pending_is_skipped():
    histories = SessionHistories(CountingLoader({("alice", "s1"): [user("kept")]}))
    histories.get(ALICE_S1)

    def broken() -> list[Message]:
        raise RuntimeError("format failed")

    histories.append(ALICE_S1, broken)
    histories.append(ALICE_S1, lambda: [assistant("after")])
    assert histories.get(ALICE_S1) == [user("kept"), assistant("after")]


def test_histories_keep_at_most_max_messages_per_session():
    histories = SessionHistories(CountingLoader(), max_messages=5)
    histories.get(ALICE_S1)
    for i in range(20):
        histories.append(ALICE_S1, lambda i=i: [user(f"q{i}"), assistant(f"a{i}")])
    got = histories.get(ALICE_S1)
    assert got == [assistant("a17"), user("q18"), assistant("a18"), user("q19"), assistant("a19")]


def test_histories_evict_least_recently_used_session():
    loader = CountingLoader()
    histories = SessionHistories(loader, max_sessions=2)
    a, b, c = (Attribution(entity_id="e", session_id=s) for s in ("a", "b", "c"))

    histories.get(a)
    histories.get(b)
    histories.get(a)
    histories.get(c)
    assert [call[1] for call in loader.calls] == ["a", "b", "c"]

    histories.get(a)
    histories.get(c)
    assert [call[1] for call in loader.calls] == ["a", "b", "c"]
    histories.get(b)
    assert [call[1] for call in loader.calls] == ["a", "b", "c", "b"]


def test_histories_load_failure_gives_empty_history_and_warns(caplog):
    def load(attribution: Attribution, limit: int) -> list[Message]:
        raise ConnectionError("database is down")

    histories = SessionHistories(load)
    with caplog.at_level(logging.WARNING, logger="memtap.history.injector"):
        assert histories.get(ALICE_S1) == []

    warnings = [
        r for r in caplog.records if r.name == "memtap.history.injector" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert "'s1'" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None


def test_histories_drop_one_entity_reloads_only_its_sessions():
    loader = CountingLoader()
    histories = SessionHistories(loader)
    alice_s2 = Attribution(entity_id="alice", session_id="s2")
    for attribution in (ALICE_S1, alice_s2, BOB_S1):
        histories.get(attribution)

    histories.drop(entity_id="alice")
    for attribution in (ALICE_S1, alice_s2, BOB_S1):
        histories.get(attribution)

    assert loader.calls[3:] == [("alice", "s1", 200), ("alice", "s2", 200)]


def test_histories_drop_all():
    loader = CountingLoader()
    histories = SessionHistories(loader)
    histories.get(ALICE_S1)
    histories.get(BOB_S1)
    histories.drop()
    histories.get(ALICE_S1)
    histories.get(BOB_S1)
    assert len(loader.calls) == 4


def test_histories_call_appended_while_another_resolves_is_kept():
    histories = SessionHistories(CountingLoader())
    histories.get(ALICE_S1)
    first = [user("first"), assistant("reply 1")]
    second = [user("second"), assistant("reply 2")]

    def resolve_first() -> list[Message]:
        concurrent = threading.Thread(target=histories.append, args=(ALICE_S1, lambda: second))
        concurrent.start()
        concurrent.join()
        return first

    histories.append(ALICE_S1, resolve_first)
    histories.get(ALICE_S1)
    assert histories.get(ALICE_S1) == first + second


def test_histories_concurrently_resolved_calls_keep_their_order():
    """A call appended while another thread resolves the session's earlier call, and read
    by a third while that resolution is still under way: the read waits for it and gets
    both calls, in the order they were made."""
    histories = SessionHistories(CountingLoader({("alice", "s1"): [user("loaded")]}))
    histories.get(ALICE_S1)
    first = [user("first"), assistant("reply 1")]
    second = [user("second"), assistant("reply 2")]
    resolving = threading.Event()
    release = threading.Event()

    def slow_first() -> list[Message]:
        resolving.set()
        assert release.wait(slack(10)), "the test never released the first call"
        return first

    histories.append(ALICE_S1, slow_first)
    reader = threading.Thread(target=histories.get, args=(ALICE_S1,))
    reader.start()
    assert resolving.wait(slack(10))  # the reader is resolving the first call now
    histories.append(ALICE_S1, lambda: second)
    late: list[list[Message]] = []
    late_reader = threading.Thread(target=lambda: late.append(list(histories.get(ALICE_S1))))
    late_reader.start()
    late_reader.join(0.05)
    assert not late, "a read returned while an earlier call was still being resolved"
    release.set()
    reader.join(slack(10))
    late_reader.join(slack(10))

    assert late == [[user("loaded"), *first, *second]]
    assert histories.get(ALICE_S1) == [user("loaded"), *first, *second]


def test_a_snapshot_is_the_session_as_it_was_taken():
    """What a call's resend check reads when the call is over: the session when the call
    was made (a call of the same session that ended meanwhile is not in it)."""
    histories = SessionHistories(CountingLoader({("alice", "s1"): [user("stored")]}))
    histories.get(ALICE_S1)
    histories.append(ALICE_S1, lambda: [assistant("first")])
    taken = histories.snapshot(ALICE_S1)
    assert taken is not None
    histories.append(ALICE_S1, lambda: [assistant("ended meanwhile")])
    assert [m.content for m in taken()] == ["stored", "first"]
    assert [m.content for m in histories.get(ALICE_S1)] == ["stored", "first", "ended meanwhile"]


def test_snapshots_resolve_each_call_once_in_a_long_session():
    """A session only ever snapshotted (history off: every call's resend check) keeps its
    pending calls few: each is resolved once, however long the session."""
    histories = SessionHistories(CountingLoader(), max_messages=50)
    histories.get(ALICE_S1)
    resolved: list[int] = []
    for i in range(300):
        taken = histories.snapshot(ALICE_S1)
        assert taken is not None
        assert len(taken()) == min(i, 50)

        def resolve(i: int = i) -> list[Message]:
            resolved.append(i)
            return [user(f"q{i}")]

        histories.append(ALICE_S1, resolve)
    assert sorted(resolved) == list(range(299))  # the last call is not read yet
    assert [m.content for m in histories.get(ALICE_S1)][-2:] == ["q298", "q299"]


def test_no_snapshot_while_the_session_is_read():
    gate = threading.Event()

    def slow(attribution: Attribution, limit: int) -> list[Message]:
        gate.wait(5)
        return [user("stored")]

    histories = SessionHistories(slow)
    try:
        assert histories.snapshot(ALICE_S1) is None  # get() waits for the read, a bounded time
    finally:
        gate.set()
    histories.close()
