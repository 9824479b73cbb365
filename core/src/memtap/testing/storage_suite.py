"""The compliance suite every memtap storage backend runs.

Subclass :class:`StoreComplianceSuite` in a test module and provide a ``store`` fixture; the
inherited ``test_*`` methods check every :class:`memtap.storage.store.Store` method and semantic::

    import pytest
    from memtap.testing.storage_suite import StoreComplianceSuite

    class TestMyStore(StoreComplianceSuite):
        @pytest.fixture
        def store(self, tmp_path):
            s = MyStore(tmp_path / "memtap.db")
            yield s
            s.close()

        @pytest.fixture
        def reopen_store(self, tmp_path):  # only for backends that persist
            opened = []
            def reopen(old):
                old.close()
                opened.append(MyStore(tmp_path / "memtap.db"))
                return opened[-1]
            yield reopen
            for s in opened:
                s.close()

A backend that lacks something trims :attr:`StoreComplianceSuite.capabilities`; the tests that
need it are then left out of the subclass when it is defined (not collected, so never shown
as skipped: a skipped storage test means something is wrong), and
``test_offers_the_methods_it_declares`` checks that the store offers exactly the optional
methods its capabilities say. A backend several processes write to (a server database)
declares a change feed instead of ``watch_sessions``::

    class TestServerStore(StoreComplianceSuite):
        capabilities = CAPABILITIES - {WATCH_SESSIONS}   # has CHANGE_FEED
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import attrs
import pytest

from memtap.protocol.model import (
    Attribution,
    Exchange,
    ExplainedFact,
    Fact,
    InjectedBlock,
    Message,
    ToolCall,
    Usage,
)
from memtap.storage.store import Store, StoreError
from memtap.testing.timing import eventually

#: Facts: ``add_facts`` / ``facts`` and superseding.
FACTS = "facts"
#: Many threads calling the store at once.
CONCURRENT_WRITES = "concurrent_writes"
#: Data survives closing and re-opening the store (needs a ``reopen_store`` fixture).
PERSISTENCE = "persistence"
#: Recall support: ``set_embeddings`` / ``indexable_facts`` (needs :data:`FACTS`).
EMBEDDINGS = "embeddings"
#: No other process writes to the store: it offers ``watch_sessions(fn)``.
WATCH_SESSIONS = "watch_sessions"
#: Other processes write to the store: it offers a change feed, ``watch_changes(fn)`` (and
#: the suite subclass a ``peer_store`` fixture). Never together with :data:`WATCH_SESSIONS`.
CHANGE_FEED = "change_feed"
#: ``memtap explain``: ``Exchange.injected`` is stored, and ``exchange(id)`` reads one exchange.
EXPLAIN = "explain"
#: A stored fact's context can be replaced: ``update_fact_context`` (needs :data:`FACTS`;
#: without it an episode keeps the context it was first stored with).
CONTEXT_UPDATES = "context_updates"
#: Every capability the suite knows.
CAPABILITIES: frozenset[str] = frozenset(
    {FACTS, CONCURRENT_WRITES, PERSISTENCE, EMBEDDINGS, WATCH_SESSIONS, CHANGE_FEED, EXPLAIN, CONTEXT_UPDATES}
)
#: What a backend is taken to support unless its suite says otherwise: everything but a
#: change feed (a store one process writes to, as DuckDB's locked file or an in-memory one).
DEFAULT_CAPABILITIES: frozenset[str] = CAPABILITIES - {CHANGE_FEED}

#: A fixed point in time the suite's data is laid out from.
T0 = _dt.datetime(2025, 1, 1, 12, 0, tzinfo=_dt.timezone.utc)

_F = TypeVar("_F", bound=Callable[..., Any])
_REQUIRES = "_memtap_requires"


def at(seconds: float) -> _dt.datetime:
    """``T0`` plus ``seconds``."""
    return T0 + _dt.timedelta(seconds=seconds)


def make_exchange(
    n: float,
    *,
    entity_id: str = "alice",
    session_id: str = "s1",
    process_id: str | None = "bot",
    **fields: Any,
) -> Exchange:
    """An exchange started ``n`` seconds after :data:`T0`: one user question, one answer."""
    fields.setdefault("input", (Message("user", f"question {n}"),))
    fields.setdefault("output", (Message("assistant", f"answer {n}"),))
    return Exchange(
        attribution=Attribution(entity_id=entity_id, session_id=session_id, process_id=process_id),
        provider=fields.pop("provider", "test"),
        operation=fields.pop("operation", "chat"),
        started_at=at(n),
        ended_at=at(n + 0.5),
        **fields,
    )


def make_fact(n: float, *, entity_id: str = "alice", **fields: Any) -> Fact:
    """A fact created ``n`` seconds after :data:`T0`."""
    fields.setdefault("text", f"fact {n}")
    return Fact(entity_id=entity_id, created_at=at(n), **fields)


def injected_blocks() -> tuple[InjectedBlock, ...]:
    """A record of injected blocks with every kind of field (and text a store could mangle)."""
    return (
        InjectedBlock(
            kind="history",
            text="user: earlier 東京 'q' \"dq\"\nassistant: ok",
            turns=(
                Message("user", "earlier 東京 'q' \"dq\"", exchange_id="ex-0"),
                Message(
                    "assistant",
                    "",
                    tool_calls=(ToolCall("call_1", "lookup", '{"q": "x"}'),),
                    exchange_id="ex-0",
                ),
                Message("tool", "42", tool_call_id="call_1", exchange_id="ex-0"),
            ),
        ),
        InjectedBlock(
            kind="recall",
            text="Facts remembered...\n- [2025-01-01] Alice lives in Tokyo 🌧",
            facts=(
                ExplainedFact(
                    "f1",
                    "Alice lives in Tokyo 🌧",
                    0.625,
                    {"bm25": 3.5, "words": 0.5, "vector": 0.1, "time": 0.0, "recency": 0.025},
                ),
            ),
            left_out=(
                ExplainedFact("f2", "'); DROP TABLE facts; --", 0.01, {"words": 0.01}, "threshold"),
                ExplainedFact("f3", "said already", 0.4, {}, "duplicate"),
                ExplainedFact("f4", "too long " * 20, 0.3, {"words": 0.3}, "budget"),
            ),
        ),
        InjectedBlock(kind="rules", text="Be kind."),
    )


def requires(*capabilities: str) -> Callable[[_F], _F]:
    """Mark a suite test as needing ``capabilities``; a suite subclass whose backend lacks
    one does not have the test (it is not collected)."""
    unknown = set(capabilities) - CAPABILITIES
    if unknown:
        raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}")

    def mark(test: _F) -> _F:
        setattr(test, _REQUIRES, frozenset(capabilities))
        return test

    return mark


def _messages(*exchanges: Exchange) -> list[Message]:
    return [m for ex in exchanges for m in ex.messages]


def _ids(exchanges: Any) -> list[str]:
    return [ex.id for ex in exchanges]


class StoreComplianceSuite:
    """Tests every :class:`memtap.storage.store.Store` backend must pass.

    Subclasses provide the ``store`` fixture (a fresh, empty, open store) and, when they
    declare :data:`PERSISTENCE`, a ``reopen_store`` fixture: a callable that closes the store
    it is given and returns a new store opened on the same data (closed by the fixture).
    """

    #: What the backend supports; remove a capability to leave out the tests that need it.
    capabilities: ClassVar[frozenset[str]] = DEFAULT_CAPABILITIES

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Keep only the tests the subclass's :attr:`capabilities` allow: the others are
        set to ``None`` on the subclass, so pytest does not collect them (chosen once,
        when the class is defined, rather than skipped in every run)."""
        super().__init_subclass__(**kwargs)
        unknown = cls.capabilities - CAPABILITIES
        if unknown:
            raise ValueError(
                f"{cls.__name__}: unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
            )
        if {WATCH_SESSIONS, CHANGE_FEED} <= cls.capabilities:
            raise ValueError(
                f"{cls.__name__} declares both {WATCH_SESSIONS!r} (no other process writes) and "
                f"{CHANGE_FEED!r} (other processes write): choose one"
            )
        for name in dir(cls):
            if not name.startswith("test"):
                continue
            test = next((k.__dict__[name] for k in cls.__mro__ if callable(k.__dict__.get(name))), None)
            if test is None:
                continue
            needed: frozenset[str] = getattr(test, _REQUIRES, frozenset())
            setattr(cls, name, None if needed - cls.capabilities else test)

    @pytest.fixture(autouse=True)
    def _memtap_capability_gate(self, request: pytest.FixtureRequest) -> None:
        # Only for capabilities changed after the class was defined (see __init_subclass__).
        # Autouse fixtures run before `store`, so a skipped test never opens a store.
        needed: frozenset[str] = getattr(request.function, _REQUIRES, frozenset())
        missing = sorted(needed - self.capabilities)
        if missing:
            pytest.skip(f"backend lacks capability {', '.join(missing)!r}")

    @pytest.fixture
    def store(self) -> Store:
        """A fresh, empty, open store (subclasses must override this fixture)."""
        pytest.fail(f"{type(self).__name__} must define a `store` fixture")

    @pytest.fixture
    def reopen_store(self) -> Callable[[Store], Store]:
        """Close a store and open it again (subclasses declaring persistence override it)."""
        pytest.fail(f"{type(self).__name__} declares {PERSISTENCE!r} but has no `reopen_store`")

    # -- shape ---------------------------------------------------------------------------

    def test_implements_store_protocol(self, store: Store) -> None:
        """The backend has every Store method and a string ``url``."""
        assert isinstance(store, Store)
        assert isinstance(store.url, str) and store.url

    def test_empty_store(self, store: Store) -> None:
        """A new store holds nothing."""
        assert store.stats() == {"sessions": 0, "exchanges": 0, "messages": 0, "facts": 0}
        assert store.history("s1") == []
        assert store.sessions() == []
        assert list(store.exchanges()) == []
        assert store.entities() == []

    # -- exchanges round-trip ------------------------------------------------------------

    def test_exchange_round_trips_every_field(self, store: Store) -> None:
        """Everything written comes back equal: messages, tool calls, usage, metadata..."""
        tokyo = _dt.timezone(_dt.timedelta(hours=9))
        ex = Exchange(
            attribution=Attribution(entity_id="alice", session_id="s1", process_id="bot"),
            provider="openai",
            operation="chat",
            input=(
                Message("user", "Weather in 東京? 🌧 \"quoted\" 'single' \\ back\nslash", name="al"),
                Message("tool", '{"temp": 12}', tool_call_id="call_0"),
            ),
            output=(
                Message(
                    "assistant",
                    "",
                    tool_calls=(
                        ToolCall("call_1", "get_weather", '{"city": "Tokyo"}'),
                        ToolCall("call_2", "lookup", "", type="custom"),
                    ),
                ),
                Message("assistant", "'); DROP TABLE exchanges; --"),
            ),
            system="You are terse.\nNever say 'never'.",
            request_model="gpt-x",
            response_model="gpt-x-2025-01-01",
            usage=Usage(input_tokens=120, output_tokens=30, cached_input_tokens=100),
            finish_reasons=("tool_calls", "stop"),
            stream=True,
            status="partial",
            error="stream cut: timeout",
            started_at=_dt.datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=tokyo),
            ended_at=_dt.datetime(2025, 3, 4, 5, 6, 9, 123456, tzinfo=tokyo),
            metadata={"request_id": "req_1", "note": "ünïcode ✓"},
        )
        store.write_exchanges([ex])
        (got,) = store.exchanges()
        assert got == ex
        assert got.messages == ex.messages
        assert got.started_at.tzinfo is not None and got.ended_at.tzinfo is not None

    def test_minimal_exchange_round_trips(self, store: Store) -> None:
        """An exchange with defaults only (no messages, unknown usage) round-trips."""
        ex = Exchange(attribution=Attribution(), provider="p", operation="embeddings")
        store.write_exchanges([ex])
        assert list(store.exchanges()) == [ex]
        assert store.history(ex.attribution.session_id) == []
        assert store.stats() == {"sessions": 1, "exchanges": 1, "messages": 0, "facts": 0}

    def test_error_exchange_round_trips(self, store: Store) -> None:
        """A failed call (status error, no output) is stored as such."""
        ex = make_exchange(1, output=(), status="error", error="HTTP 500: upstream failed")
        store.write_exchanges([ex])
        assert list(store.exchanges()) == [ex]

    # -- what was injected (memtap explain) -----------------------------------------------

    @requires(EXPLAIN)
    def test_injected_blocks_round_trip(self, store: Store) -> None:
        """What memtap injected into a call (history turns, recalled facts with scores and
        score parts, facts left out and why, another injector's block) comes back equal,
        through exchanges() and exchange(id)."""
        blocks = injected_blocks()
        ex = make_exchange(1, injected=blocks)
        plain = make_exchange(2)
        store.write_exchanges([ex, plain])
        got = {e.id: e for e in store.exchanges()}
        assert got[ex.id].injected == blocks
        assert got[ex.id].injected[0].turns[0].exchange_id == "ex-0"
        assert got[plain.id].injected == ()
        one = store.exchange(ex.id)
        assert one == ex and one.messages == ex.messages
        assert one.injected == blocks
        again = store.exchange(plain.id)
        assert again == plain and again is not None and again.injected == ()

    @requires(EXPLAIN)
    def test_exchange_by_id(self, store: Store) -> None:
        """exchange(id) reads one exchange with its messages; an unknown id is ``None``;
        another entity's exchange is found by its id (the id is the key)."""
        a, b = make_exchange(1), make_exchange(2, entity_id="bob", session_id="s9")
        store.write_exchanges([a, b])
        assert store.exchange("no-such-id") is None
        found = store.exchange(b.id)
        assert found == b and found is not None and found.messages == b.messages
        empty = Exchange(attribution=Attribution(), provider="p", operation="embeddings")
        store.write_exchanges([empty])
        assert store.exchange(empty.id) == empty

    @requires(EXPLAIN)
    def test_forget_deletes_what_was_injected(self, store: Store) -> None:
        """The record of what was injected goes with the entity's exchanges."""
        ex = make_exchange(1, injected=injected_blocks())
        store.write_exchanges([ex])
        store.forget(entity_id="alice")
        assert store.exchange(ex.id) is None
        assert list(store.exchanges()) == []

    def test_exchanges_oldest_first_and_filtered(self, store: Store) -> None:
        """exchanges() orders by start time and filters by entity and session."""
        a2 = make_exchange(2)
        b3 = make_exchange(3, entity_id="bob")
        a1 = make_exchange(1, session_id="s2")
        a4 = make_exchange(4, session_id="s2")
        store.write_exchanges([a2, b3])
        store.write_exchanges([a4, a1])
        assert _ids(store.exchanges()) == _ids([a1, a2, b3, a4])
        assert _ids(store.exchanges(entity_id="alice")) == _ids([a1, a2, a4])
        assert _ids(store.exchanges(session_id="s1")) == _ids([a2, b3])
        assert _ids(store.exchanges(entity_id="alice", session_id="s1")) == _ids([a2])
        assert list(store.exchanges(entity_id="carol")) == []

    def test_many_exchanges_in_one_batch(self, store: Store) -> None:
        """A large batch is stored whole and read back in order, messages attached."""
        batch = [
            make_exchange(i, session_id=f"s{i % 7}")
            if i % 5
            else make_exchange(i, session_id=f"s{i % 7}", input=(), output=())
            for i in range(1500)
        ]
        store.write_exchanges(batch)
        assert list(store.exchanges()) == batch
        assert store.stats() == {
            "sessions": 7,
            "exchanges": 1500,
            "messages": sum(len(ex.messages) for ex in batch),
            "facts": 0,
        }

    # -- history -------------------------------------------------------------------------

    def test_history_is_the_sessions_messages_oldest_first(self, store: Store) -> None:
        """history() returns every message of the session ordered by exchange start, then
        by position, stamped with the exchange id and start time."""
        ex1 = make_exchange(
            1,
            input=(Message("user", "a"), Message("user", "b"), Message("user", "c")),
            output=(Message("assistant", "d"), Message("assistant", "e")),
        )
        ex2, ex3 = make_exchange(2), make_exchange(3)
        store.write_exchanges([ex2, ex1])  # written out of order
        store.write_exchanges([ex3])
        got = store.history("s1")
        assert got == _messages(ex1, ex2, ex3)
        stamps = [(ex.id, ex.started_at) for ex in (ex1, ex2, ex3) for _ in ex.messages]
        assert [(m.exchange_id, m.created_at) for m in got] == stamps
        assert all(m.created_at is not None and m.created_at.tzinfo for m in got)

    def test_history_keeps_tool_calls(self, store: Store) -> None:
        """Tool calls and tool answers survive in history."""
        call = ToolCall("call_1", "get_time", '{"tz": "UTC"}')
        ex = make_exchange(
            1,
            input=(Message("user", "time?"), Message("tool", "12:00", tool_call_id="call_0")),
            output=(Message("assistant", tool_calls=(call,)),),
        )
        store.write_exchanges([ex])
        got = store.history("s1")
        assert got == list(ex.messages)
        assert got[2].tool_calls == (call,) and got[1].tool_call_id == "call_0"

    def test_history_limit_returns_the_latest_oldest_first(self, store: Store) -> None:
        """With a limit, history() returns only the latest messages, still oldest first."""
        exs = [make_exchange(i) for i in (1, 2, 3)]
        store.write_exchanges(exs)
        every = _messages(*exs)
        assert store.history("s1", limit=3) == every[-3:]
        assert store.history("s1", limit=1) == every[-1:]
        assert store.history("s1", limit=6) == every
        assert store.history("s1", limit=100) == every
        assert store.history("s1", limit=None) == every

    def test_history_limit_zero_is_empty(self, store: Store) -> None:
        """The latest zero messages are no messages."""
        store.write_exchanges([make_exchange(1)])
        assert store.history("s1", limit=0) == []

    def test_history_of_unknown_session_is_empty(self, store: Store) -> None:
        """A session nobody wrote to has no history."""
        store.write_exchanges([make_exchange(1)])
        assert store.history("nope") == []
        assert store.history("s1", entity_id="nobody") == []

    def test_history_entity_filter_isolates_same_session_id(self, store: Store) -> None:
        """Two entities may use the same session id; the entity filter keeps them apart."""
        a1, b2, a3 = make_exchange(1), make_exchange(2, entity_id="bob"), make_exchange(3)
        other = make_exchange(4, session_id="s2")
        store.write_exchanges([a1, b2, a3, other])
        assert store.history("s1", entity_id="alice") == _messages(a1, a3)
        assert store.history("s1", entity_id="bob") == _messages(b2)
        assert store.history("s1") == _messages(a1, b2, a3)
        assert store.history("s1", entity_id="alice", limit=1) == _messages(a3)[-1:]
        assert store.history("s2", entity_id="bob") == []

    # -- idempotency ---------------------------------------------------------------------

    def test_rewriting_a_batch_changes_nothing(self, store: Store) -> None:
        """Writing the same exchanges again (a retry) stores nothing new."""
        batch = [make_exchange(1), make_exchange(2, entity_id="bob"), make_exchange(3)]
        store.write_exchanges(batch)
        before = (store.stats(), store.history("s1"), store.sessions(), list(store.exchanges()))
        store.write_exchanges(batch)
        store.write_exchanges(batch[1:])
        after = (store.stats(), store.history("s1"), store.sessions(), list(store.exchanges()))
        assert after == before

    def test_retried_batch_adds_only_new_exchanges(self, store: Store) -> None:
        """A batch mixing stored and new exchanges adds only the new ones."""
        a, b, c = make_exchange(1), make_exchange(2), make_exchange(3)
        store.write_exchanges([a, b])
        store.write_exchanges([a, b, c])
        assert _ids(store.exchanges()) == _ids([a, b, c])
        assert store.history("s1") == _messages(a, b, c)
        assert store.sessions()[0].exchange_count == 3

    def test_first_write_of_an_id_wins(self, store: Store) -> None:
        """An id already stored (or repeated in a batch) keeps its first content."""
        a = make_exchange(1)
        changed = attrs.evolve(a, output=(Message("assistant", "changed"),))
        store.write_exchanges([a, changed])
        store.write_exchanges([changed])
        assert list(store.exchanges()) == [a]
        assert store.stats()["messages"] == 2

    def test_empty_writes_are_noops(self, store: Store) -> None:
        """Empty batches are accepted and change nothing."""
        store.write_exchanges([])
        assert store.stats()["exchanges"] == 0
        if FACTS in self.capabilities:
            store.add_facts([])
            assert store.stats()["facts"] == 0

    # -- sessions ------------------------------------------------------------------------

    def test_sessions_most_recent_first_with_counts(self, store: Store) -> None:
        """sessions() lists (entity, session) pairs by last activity with exchange counts."""
        store.write_exchanges(
            [
                make_exchange(1),
                make_exchange(3, session_id="s2"),
                make_exchange(4, entity_id="bob", process_id="other"),
            ]
        )
        store.write_exchanges([make_exchange(5)])
        got = store.sessions()
        assert [(s.entity_id, s.session_id, s.exchange_count) for s in got] == [
            ("alice", "s1", 2),
            ("bob", "s1", 1),
            ("alice", "s2", 1),
        ]
        first = got[0]
        assert (first.created_at, first.updated_at, first.process_id) == (at(1), at(5), "bot")
        assert got[1].process_id == "other"
        assert [s.session_id for s in store.sessions(entity_id="alice")] == ["s1", "s2"]
        assert [s.entity_id for s in store.sessions(entity_id="bob")] == ["bob"]
        assert store.sessions(entity_id="carol") == []
        assert [s.session_id for s in store.sessions(limit=1)] == ["s1"]
        assert len(store.sessions(limit=2)) == 2

    def test_sessions_span_out_of_order_writes(self, store: Store) -> None:
        """A session's first and last activity come from its exchanges' start times, in
        whatever order they were written."""
        store.write_exchanges([make_exchange(5)])
        store.write_exchanges([make_exchange(1), make_exchange(3)])
        (s,) = store.sessions()
        assert (s.created_at, s.updated_at, s.exchange_count) == (at(1), at(5), 3)
        assert s.created_at.tzinfo is not None

    # -- facts ---------------------------------------------------------------------------

    @requires(FACTS)
    def test_fact_round_trips_every_field(self, store: Store) -> None:
        """Every fact field comes back equal."""
        fact = Fact(
            entity_id="alice",
            text='Alice lives in 東京 and says "it\'s great"',
            process_id="bot",
            kind="episode",
            source_exchange_id="ex1",
            created_at=_dt.datetime(2025, 2, 3, 4, 5, 6, 7, tzinfo=_dt.timezone(-_dt.timedelta(hours=5))),
            metadata={"confidence": "high"},
        )
        store.add_facts([fact])
        assert store.facts(entity_id="alice") == [fact]
        assert store.stats()["facts"] == 1

    @requires(FACTS)
    def test_facts_newest_first_filtered_and_isolated(self, store: Store) -> None:
        """facts() returns one entity's facts, newest first, optionally one process's."""
        f1 = make_fact(1, process_id="p1")
        f3 = make_fact(3, process_id="p2")
        f2 = make_fact(2, process_id="p1")
        bob = make_fact(4, entity_id="bob", process_id="p1")
        store.add_facts([f1, f3])
        store.add_facts([f2, bob])
        assert store.facts(entity_id="alice") == [f3, f2, f1]
        assert store.facts(entity_id="alice", process_id="p1") == [f2, f1]
        assert store.facts(entity_id="alice", process_id="p3") == []
        assert store.facts(entity_id="bob") == [bob]
        assert store.facts(entity_id="carol") == []

    @requires(FACTS)
    def test_add_facts_is_idempotent(self, store: Store) -> None:
        """Known fact ids are skipped; the first content of an id wins."""
        f = make_fact(1)
        store.add_facts([f, attrs.evolve(f, text="changed")])
        store.add_facts([f])
        store.add_facts([attrs.evolve(f, text="changed again")])
        assert store.facts(entity_id="alice") == [f]
        assert store.stats()["facts"] == 1

    @requires(FACTS)
    def test_superseding_fact_marks_the_old_one(self, store: Store) -> None:
        """A fact that supersedes another hides it; the old one stays, marked."""
        old = make_fact(1, text="Alice lives in Paris")
        new = make_fact(2, text="Alice lives in Tokyo", supersedes=old.id)
        store.add_facts([old])
        store.add_facts([new])
        assert store.facts(entity_id="alice") == [new]
        assert store.facts(entity_id="alice", include_superseded=True) == [
            new,
            attrs.evolve(old, superseded_by=new.id),
        ]
        store.add_facts([old])  # re-adding the old fact does not revive it
        assert store.facts(entity_id="alice") == [new]

    @requires(FACTS)
    def test_supersede_within_one_batch(self, store: Store) -> None:
        """Superseding works when both facts arrive in the same batch."""
        old = make_fact(1)
        new = make_fact(2, supersedes=old.id)
        store.add_facts([old, new])
        assert store.facts(entity_id="alice") == [new]
        (_, marked) = store.facts(entity_id="alice", include_superseded=True)
        assert marked.superseded_by == new.id

    @requires(FACTS)
    def test_first_supersede_claim_wins(self, store: Store) -> None:
        """A fact already superseded keeps its first successor."""
        old = make_fact(1)
        first, second = make_fact(2, supersedes=old.id), make_fact(3, supersedes=old.id)
        store.add_facts([old, first])
        store.add_facts([second])
        assert store.facts(entity_id="alice") == [second, first]
        marked = store.facts(entity_id="alice", include_superseded=True)[-1]
        assert marked.id == old.id and marked.superseded_by == first.id

    @requires(FACTS)
    def test_superseding_an_unknown_fact_is_harmless(self, store: Store) -> None:
        """A fact naming a fact that is not stored is stored as it is."""
        f = make_fact(1, supersedes="no-such-fact")
        store.add_facts([f])
        assert store.facts(entity_id="alice") == [f]

    @requires(FACTS)
    def test_supersede_never_crosses_entities(self, store: Store) -> None:
        """One entity's fact cannot hide (or mark) another entity's fact."""
        alices = make_fact(1)
        bobs = make_fact(2, entity_id="bob", supersedes=alices.id)
        store.add_facts([alices])
        store.add_facts([bobs])
        assert store.facts(entity_id="alice") == [alices]
        assert store.facts(entity_id="alice", include_superseded=True) == [alices]

    @requires(FACTS, CONTEXT_UPDATES)
    def test_update_fact_context_replaces_only_the_context(self, store: Store) -> None:
        """update_fact_context() gives stored facts the given context (an empty one removes
        it), keeping every other field and metadata key; returns the ids it updated."""
        said = make_fact(1, text="I adopted a beagle", source_exchange_id="ex1", kind="episode",
                         metadata={"context": "before it", "role": "assistant"})  # fmt: skip
        bare = make_fact(2, text="We moved to Lyon", source_exchange_id="ex2", kind="episode")
        gone = make_fact(3, text="Noted", source_exchange_id="ex3", metadata={"context": "old"})
        store.add_facts([said, bare, gone])
        updates = [
            attrs.evolve(said, metadata={"context": "before it\nHow lovely! What is her name?"}),
            attrs.evolve(bare, metadata={"context": "It's June 東京 'q' \"dq\""}),
            attrs.evolve(gone, metadata={}),
        ]
        assert sorted(store.update_fact_context(updates)) == sorted([said.id, bare.id, gone.id])
        got = {f.id: f for f in store.facts(entity_id="alice")}
        assert got[said.id] == attrs.evolve(
            said, metadata={"context": "before it\nHow lovely! What is her name?", "role": "assistant"}
        )
        assert got[bare.id] == attrs.evolve(bare, metadata={"context": "It's June 東京 'q' \"dq\""})
        assert got[gone.id] == attrs.evolve(gone, metadata={})
        assert store.stats()["facts"] == 3
        # The same update again is harmless; nothing to update is nothing.
        assert store.update_fact_context(updates[:1]) == [said.id]
        assert store.update_fact_context([]) == []
        assert {f.id: f for f in store.facts(entity_id="alice")} == got

    @requires(FACTS, CONTEXT_UPDATES)
    def test_update_fact_context_needs_the_facts_own_exchange_and_entity(self, store: Store) -> None:
        """A fact is updated only by a fact of its id, entity and source exchange: the same
        turn said in another exchange (the same episode id) keeps the context it was first
        said with; unknown ids are ignored."""
        first = make_fact(1, text="My favourite colour is teal", source_exchange_id="ex1",
                          metadata={"context": "Noted, teal it is"})  # fmt: skip
        store.add_facts([first])
        again = attrs.evolve(first, source_exchange_id="ex9", metadata={"context": "Teal is calm"})
        elsewhere = attrs.evolve(first, entity_id="bob", metadata={"context": "Bob's"})
        unknown = make_fact(2, source_exchange_id="ex1", metadata={"context": "nothing"})
        assert store.update_fact_context([again, elsewhere, unknown]) == []
        assert store.facts(entity_id="alice") == [first]
        assert store.facts(entity_id="bob") == []

    @requires(FACTS, EMBEDDINGS, CONTEXT_UPDATES)
    def test_an_updated_fact_keeps_its_vector_and_is_indexable_with_its_new_context(
        self, store: Store
    ) -> None:
        """What recall loads after an update: the new context, the vector it had."""
        f = make_fact(1, text="Yes, in June!", source_exchange_id="ex1", metadata={"context": "a trip?"})
        store.add_facts([f])
        store.set_embeddings({f.id: [0.5, 0.25]}, model="m")
        new = attrs.evolve(f, metadata={"context": "a trip?\nLisbon sounds lovely"})
        assert store.update_fact_context([new]) == [f.id]
        ((fact, vec),) = store.indexable_facts(entity_id="alice", model="m")
        assert fact == new and vec is not None and list(vec) == [0.5, 0.25]

    # -- embeddings (recall) -------------------------------------------------------------

    @requires(FACTS, EMBEDDINGS)
    def test_indexable_facts_are_current_oldest_first_with_vectors(self, store: Store) -> None:
        """indexable_facts() lists an entity's current facts oldest first, each with its
        vector when the stored one was made by the asked model (``None`` otherwise)."""
        old = make_fact(1, text="Alice lives in Paris")
        new = make_fact(3, text="Alice lives in Tokyo", supersedes=old.id)
        other = make_fact(2, text="Alice has a beagle", process_id="p1")
        bobs = make_fact(4, entity_id="bob")
        store.add_facts([old, other, new, bobs])
        store.set_embeddings({new.id: [1.0, 0.0, 0.5], other.id: [0.0, 1.0, 0.25]}, model="m1")
        rows = store.indexable_facts(entity_id="alice", model="m1")
        assert [f for f, _ in rows] == [other, new]
        assert [list(v) if v is not None else None for _, v in rows] == [[0.0, 1.0, 0.25], [1.0, 0.0, 0.5]]
        store.set_embeddings({new.id: [9.0, 9.0, 9.0]}, model="m2")  # one vector per fact
        rows = store.indexable_facts(entity_id="alice", model="m2")
        assert [list(v) if v is not None else None for _, v in rows] == [None, [9.0, 9.0, 9.0]]
        rows = store.indexable_facts(entity_id="alice", model="m1")
        assert [list(v) if v is not None else None for _, v in rows] == [[0.0, 1.0, 0.25], None]
        assert [v for _, v in store.indexable_facts(entity_id="alice")] == [None, None]
        assert [f for f, _ in store.indexable_facts(entity_id="bob", model="m1")] == [bobs]
        assert store.indexable_facts(entity_id="carol", model="m1") == []

    @requires(FACTS, EMBEDDINGS)
    def test_set_embeddings_replaces_and_ignores_unknown_ids(self, store: Store) -> None:
        """A fact's vector is replaced by a later one; ids that are not stored are ignored;
        vectors keep float32 precision at least."""
        f = make_fact(1)
        store.add_facts([f])
        store.set_embeddings({f.id: [0.1, 0.2]}, model="m")
        store.set_embeddings({f.id: [0.3, 0.4], "no-such-fact": [1.0, 1.0]}, model="m")
        store.set_embeddings({}, model="m")
        ((_, vec),) = store.indexable_facts(entity_id="alice", model="m")
        assert vec is not None and [round(x, 6) for x in vec] == [0.3, 0.4]

    @requires(FACTS, EMBEDDINGS)
    def test_forget_deletes_embeddings(self, store: Store) -> None:
        """forget() removes an entity's vectors with its facts; re-adding the fact id
        starts without a vector."""
        f = make_fact(1)
        store.add_facts([f])
        store.set_embeddings({f.id: [1.0, 2.0]}, model="m")
        store.forget(entity_id="alice")
        store.add_facts([f])
        assert store.indexable_facts(entity_id="alice", model="m") == [(f, None)]

    @requires(FACTS)
    def test_forget_facts_deletes_only_those_facts_of_that_entity(self, store: Store) -> None:
        """forget_facts() deletes the named facts of the entity with their vectors, returns
        how many, and ignores unknown ids and other entities' facts."""
        forget_facts = getattr(store, "forget_facts", None)
        if forget_facts is None:
            pytest.skip("the store has no forget_facts (optional)")
        keep, gone, bobs = make_fact(1), make_fact(2), make_fact(3, entity_id="bob")
        store.add_facts([keep, gone, bobs])
        store.set_embeddings({gone.id: [1.0, 2.0], keep.id: [3.0, 4.0]}, model="m")
        assert forget_facts(entity_id="alice", fact_ids=[gone.id, bobs.id, "unknown"]) == 1
        assert store.facts(entity_id="alice", include_superseded=True) == [keep]
        assert store.facts(entity_id="bob") == [bobs]
        assert [(f, list(v or ())) for f, v in store.indexable_facts(entity_id="alice", model="m")] == [
            (keep, [3.0, 4.0])
        ]
        assert forget_facts(entity_id="alice", fact_ids=[]) == 0
        store.add_facts([gone])  # written again: without its old vector
        assert (gone, None) in store.indexable_facts(entity_id="alice", model="m")

    # -- entities --------------------------------------------------------------------------

    def test_entities_lists_every_entity_with_data_sorted(self, store: Store) -> None:
        """entities() names each entity with an exchange, once, sorted; with facts, also an
        entity that has facts only (superseded ones count) and never had a session."""
        store.write_exchanges([make_exchange(1, entity_id="carol"), make_exchange(2), make_exchange(3)])
        expected = ["alice", "carol"]
        if FACTS in self.capabilities:
            old = make_fact(1, entity_id="dave")
            store.add_facts([make_fact(2), old, make_fact(3, entity_id="dave", supersedes=old.id)])
            store.add_facts([make_fact(4, entity_id="bob")])
            expected = ["alice", "bob", "carol", "dave"]
        assert store.entities() == expected
        store.forget(entity_id="carol")
        assert store.entities() == [e for e in expected if e != "carol"]

    # -- forget and stats ----------------------------------------------------------------

    def test_forget_deletes_only_that_entity(self, store: Store) -> None:
        """forget() removes an entity's exchanges, messages, sessions (and facts), returns
        the number of exchanges plus facts removed, and leaves other entities alone."""
        alice = [make_exchange(1), make_exchange(2, session_id="s2"), make_exchange(3)]
        bob = [make_exchange(4, entity_id="bob"), make_exchange(5, entity_id="bob")]
        store.write_exchanges(alice + bob)
        expected = len(alice)
        bobs_fact = make_fact(3, entity_id="bob")
        if FACTS in self.capabilities:
            store.add_facts([make_fact(1), make_fact(2), bobs_fact])
            expected += 2
        assert store.forget(entity_id="alice") == expected
        assert store.history("s1") == _messages(*bob)
        assert store.history("s2") == []
        assert [(s.entity_id, s.exchange_count) for s in store.sessions()] == [("bob", 2)]
        assert list(store.exchanges()) == bob
        assert store.stats() == {
            "sessions": 1,
            "exchanges": 2,
            "messages": 4,
            "facts": 1 if FACTS in self.capabilities else 0,
        }
        if FACTS in self.capabilities:
            assert store.facts(entity_id="alice", include_superseded=True) == []
            assert store.facts(entity_id="bob") == [bobs_fact]
        assert store.forget(entity_id="alice") == 0
        assert store.forget(entity_id="nobody") == 0

    def test_forgotten_exchanges_can_be_written_again(self, store: Store) -> None:
        """After forget(), the same exchange ids are new again."""
        batch = [make_exchange(1), make_exchange(2)]
        store.write_exchanges(batch)
        assert store.forget(entity_id="alice") == 2
        store.write_exchanges(batch)
        assert store.history("s1") == _messages(*batch)
        assert store.stats()["exchanges"] == 2

    def test_stats_counts_rows(self, store: Store) -> None:
        """stats() counts sessions (per entity), exchanges, messages and facts."""
        store.write_exchanges(
            [
                make_exchange(1),
                make_exchange(2, entity_id="bob"),
                make_exchange(3, output=()),
                make_exchange(4, session_id="s2"),
            ]
        )
        facts = 0
        if FACTS in self.capabilities:
            store.add_facts([make_fact(1), make_fact(2, entity_id="bob")])
            facts = 2
        assert store.stats() == {"sessions": 3, "exchanges": 4, "messages": 7, "facts": facts}

    # -- what memtap reads at start: session keys, identity --------------------------------

    def test_session_keys_list_every_stored_session(self, store: Store) -> None:
        """session_keys() lists each stored (entity, session) once; forget removes them.
        (Optional: a backend without it is skipped.)"""
        if getattr(store, "session_keys", None) is None:
            pytest.skip("backend has no session_keys (optional)")
        assert list(store.session_keys()) == []
        store.write_exchanges(
            [
                make_exchange(1),
                make_exchange(2, session_id="s2"),
                make_exchange(3, entity_id="bob"),
                make_exchange(4),
            ]
        )
        assert sorted(store.session_keys()) == [("alice", "s1"), ("alice", "s2"), ("bob", "s1")]
        store.forget(entity_id="bob")
        assert sorted(store.session_keys()) == [("alice", "s1"), ("alice", "s2")]

    def test_offers_the_methods_it_declares(self, store: Store) -> None:
        """The store offers ``watch_sessions`` exactly when its suite declares
        :data:`WATCH_SESSIONS` and ``watch_changes`` exactly when it declares
        :data:`CHANGE_FEED` (the tests of what it does not declare are left out)."""
        methods = {
            WATCH_SESSIONS: "watch_sessions",
            CHANGE_FEED: "watch_changes",
            CONTEXT_UPDATES: "update_fact_context",
        }
        for capability, method in methods.items():
            offered = getattr(store, method, None) is not None
            declared = capability in self.capabilities
            assert offered == declared, (
                f"{type(store).__name__} {'offers' if offered else 'does not offer'} {method}: "
                f"{'add' if offered else 'remove'} {capability!r} in {type(self).__name__}.capabilities"
            )

    @requires(WATCH_SESSIONS)
    def test_watch_sessions_reports_every_exchange_written(self, store: Store) -> None:
        """A store offering watch_sessions() (one only this process writes) reports the
        session of every exchange written through it."""
        watch = getattr(store, "watch_sessions", None)
        assert watch is not None, "declares watch_sessions but the store has none"
        seen: list[tuple[str, str]] = []
        watch(lambda entity_id, session_id: seen.append((entity_id, session_id)))
        store.write_exchanges([make_exchange(1), make_exchange(2, session_id="s2", entity_id="bob")])
        assert sorted(set(seen)) == [("alice", "s1"), ("bob", "s2")]

    @requires(CHANGE_FEED)
    def test_watch_changes_reports_other_store_objects_writes(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        """A store offering watch_changes() (a change feed: other processes write to it)
        reports, soon after they commit, the changes written through another store object
        on the same data (the ``peer_store`` fixture), not its own; never together with
        watch_sessions(), which says no other process writes."""
        watch = getattr(store, "watch_changes", None)
        assert watch is not None, "declares a change feed but the store has no watch_changes"
        from memtap.storage.changes import EVERYTHING, StoreChange

        assert getattr(store, "watch_sessions", None) is None, "watch_sessions says no other process writes"
        peer: Store = request.getfixturevalue("peer_store")
        heard: list[StoreChange] = []
        watch(heard.append)
        assert eventually(lambda: EVERYTHING in heard), "the feed never said it was listening"
        fact = make_fact(1, entity_id="bob")
        store.add_facts([make_fact(0, entity_id="own")])
        peer.add_facts([fact])
        peer.write_exchanges([make_exchange(2, entity_id="carol", session_id="s2")])
        peer.forget(entity_id="dave")
        want = [
            StoreChange(entity_id="bob", facts=True),
            StoreChange(entity_id="carol", session_id="s2"),
            StoreChange(entity_id="dave", forgotten=True),
        ]

        def reported() -> list[StoreChange]:
            # A feed may name the facts added; if it does, exactly those.
            assert all(c.fact_ids in ((), (fact.id,)) for c in heard), heard
            return [attrs.evolve(c, fact_ids=()) for c in heard if c != EVERYTHING]

        assert eventually(lambda: reported() == want), heard
        # A write that stores nothing new (a retried batch) tells nobody: the feed keeps
        # the order of writes, so once the next write's report is in, its would be too.
        peer.add_facts([fact])
        peer.forget(entity_id="erin")
        marker = StoreChange(entity_id="erin", forgotten=True)
        assert eventually(lambda: marker in heard), heard
        assert reported() == [*want, marker]

    @requires(CHANGE_FEED, FACTS, CONTEXT_UPDATES)
    def test_watch_changes_reports_context_updates_as_the_facts_changed(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        """Another store object's context update is reported as a change of the entity's
        facts, naming them if the feed names facts (the other process reads them again)."""
        from memtap.storage.changes import EVERYTHING, StoreChange

        watch = getattr(store, "watch_changes", None)
        assert watch is not None
        peer: Store = request.getfixturevalue("peer_store")
        fact = make_fact(1, entity_id="bob", source_exchange_id="ex1", metadata={"context": "a"})
        store.add_facts([fact])
        heard: list[StoreChange] = []
        watch(heard.append)
        assert eventually(lambda: EVERYTHING in heard), "the feed never said it was listening"
        peer.update_fact_context([attrs.evolve(fact, metadata={"context": "a\nb"})])
        assert eventually(lambda: any(c.entity_id == "bob" and c.facts for c in heard)), heard
        assert all(c.fact_ids in ((), (fact.id,)) for c in heard if c != EVERYTHING), heard
        # An update that changes nothing stored tells nobody (reported in write order: once
        # the next write's report is in, its would be too).
        peer.update_fact_context([attrs.evolve(fact, source_exchange_id="other")])
        peer.forget(entity_id="erin")
        marker = StoreChange(entity_id="erin", forgotten=True)
        assert eventually(lambda: marker in heard), heard
        assert len([c for c in heard if c not in (EVERYTHING, marker)]) == 1, heard

    @pytest.fixture
    def peer_store(self) -> Store:
        """Another store object on the same data as ``store`` (another process's view;
        backends offering ``watch_changes`` override it)."""
        pytest.fail(f"{type(self).__name__} offers watch_changes but has no `peer_store` fixture")

    def test_identity_is_stable_and_holds_no_secret(self, store: Store) -> None:
        """identity() answers the same string every time (``None`` only for a store that
        keeps nothing), without the URL's password. (Optional: skipped without it.)"""
        if getattr(store, "identity", None) is None:
            pytest.skip("backend has no identity (optional)")
        first = store.identity()
        assert first is None or (isinstance(first, str) and first)
        assert store.identity() == first
        password = urlsplit(store.url).password
        if first is not None and password:
            assert password not in first

    @requires(PERSISTENCE)
    def test_identity_survives_reopening(self, store: Store, reopen_store: Callable[[Store], Store]) -> None:
        """The same data opened again has the same identity (the spool is keyed by it)."""
        if getattr(store, "identity", None) is None:
            pytest.skip("backend has no identity (optional)")
        before = store.identity()
        assert before is not None, "a store that persists must have an identity"
        assert reopen_store(store).identity() == before

    # -- close ---------------------------------------------------------------------------

    def test_calls_after_close_raise_store_error(self, store: Store) -> None:
        """Every call on a closed store raises StoreError saying it is closed."""
        store.close()
        calls: list[Callable[[], object]] = [
            lambda: store.write_exchanges([make_exchange(1)]),
            lambda: store.write_exchanges([]),
            lambda: store.history("s1"),
            lambda: store.history("s1", limit=0),
            store.sessions,
            lambda: list(store.exchanges()),
            store.entities,
            lambda: store.forget(entity_id="alice"),
            store.stats,
        ]
        if FACTS in self.capabilities:
            calls += [
                lambda: store.add_facts([make_fact(1)]),
                lambda: store.add_facts([]),
                lambda: store.facts(entity_id="alice"),
            ]
        for call in calls:
            with pytest.raises(StoreError, match="closed"):
                call()

    def test_close_twice_is_harmless(self, store: Store) -> None:
        """Closing a closed store does nothing."""
        store.close()
        store.close()

    # -- persistence ---------------------------------------------------------------------

    @requires(PERSISTENCE)
    def test_data_survives_reopening(self, store: Store, reopen_store: Callable[[Store], Store]) -> None:
        """Everything written is there after closing and opening the store again."""
        batch = [make_exchange(1), make_exchange(2, entity_id="bob"), make_exchange(3)]
        store.write_exchanges(batch)
        if FACTS in self.capabilities:
            old = make_fact(1)
            store.add_facts([old, make_fact(2, supersedes=old.id)])
        before = (
            list(store.exchanges()),
            store.history("s1"),
            [(m.exchange_id, m.created_at) for m in store.history("s1")],
            store.sessions(),
            store.stats(),
            store.entities(),
            store.facts(entity_id="alice", include_superseded=True) if FACTS in self.capabilities else [],
        )
        store = reopen_store(store)
        after = (
            list(store.exchanges()),
            store.history("s1"),
            [(m.exchange_id, m.created_at) for m in store.history("s1")],
            store.sessions(),
            store.stats(),
            store.entities(),
            store.facts(entity_id="alice", include_superseded=True) if FACTS in self.capabilities else [],
        )
        assert after == before
        store.write_exchanges(batch)  # still idempotent across a reopen
        assert store.stats() == before[4]
        store.write_exchanges([make_exchange(4)])
        assert store.stats()["exchanges"] == 4

    # -- concurrency ---------------------------------------------------------------------

    @requires(CONCURRENT_WRITES)
    def test_many_threads_write_and_read_at_once(self, store: Store) -> None:
        """16 threads writing (with retries) and reading at once lose and duplicate nothing."""
        threads, batches, size = 16, 8, 4
        start = threading.Barrier(threads)

        def work(t: int) -> None:
            start.wait()
            for b in range(batches):
                batch = [make_exchange(t * 1000 + b * 10 + i, session_id=f"t{t}") for i in range(size)]
                batch.append(make_exchange(b * 100 + t, session_id="shared", entity_id="all"))
                store.write_exchanges(batch)
                store.write_exchanges(batch[::2])  # a retry
                assert len(store.history(f"t{t}", limit=3)) == 3
                store.history("shared")
                store.sessions(limit=5)
                store.stats()

        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(work, t) for t in range(threads)]:
                future.result()
        per_thread = batches * size
        assert store.stats() == {
            "sessions": threads + 1,
            "exchanges": threads * (per_thread + batches),
            "messages": 2 * threads * (per_thread + batches),
            "facts": 0,
        }
        for t in range(threads):
            got = store.history(f"t{t}")
            assert len(got) == 2 * per_thread
            assert got == sorted(got, key=lambda m: m.created_at or T0)
        shared = store.history("shared")
        assert len(shared) == 2 * threads * batches
        assert [m.created_at for m in shared] == sorted(m.created_at or T0 for m in shared)

    @requires(CONCURRENT_WRITES)
    def test_identical_batches_from_many_threads_are_stored_once(self, store: Store) -> None:
        """Racing retries of one batch store it exactly once."""
        batch = [make_exchange(i) for i in range(20)]
        start = threading.Barrier(16)

        def write() -> None:
            start.wait()
            store.write_exchanges(batch)

        with ThreadPoolExecutor(16) as pool:
            for future in [pool.submit(write) for _ in range(16)]:
                future.result()
        assert list(store.exchanges()) == batch
        assert store.sessions()[0].exchange_count == 20

    @requires(CONCURRENT_WRITES, FACTS)
    def test_many_threads_add_facts_at_once(self, store: Store) -> None:
        """Concurrent add_facts calls (with retries) keep every fact once."""
        start = threading.Barrier(16)

        def work(t: int) -> None:
            start.wait()
            facts = [make_fact(t * 100 + i, entity_id=f"e{t % 4}") for i in range(10)]
            store.add_facts(facts)
            store.add_facts(facts)
            store.facts(entity_id=f"e{t % 4}")

        with ThreadPoolExecutor(16) as pool:
            for future in [pool.submit(work, t) for t in range(16)]:
                future.result()
        assert store.stats()["facts"] == 160
        assert all(len(store.facts(entity_id=f"e{e}")) == 40 for e in range(4))
