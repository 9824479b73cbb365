"""PostgresStore: the storage compliance suite plus PostgreSQL specifics."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pluggy
import pytest

import memtap_postgres
from memtap import hookspecs
from memtap.storage.store import Store, StoreError
from memtap.testing.storage_suite import (
    CAPABILITIES,
    WATCH_SESSIONS,
    StoreComplianceSuite,
    make_exchange,
    make_fact,
)
from memtap_postgres.urls import redact_url, split_schema

PLUGIN_DIR = Path(__file__).parents[3] / "plugins" / "postgres"


class TestPostgresCompliance(StoreComplianceSuite):
    # Many processes write to one database: a change feed, never watch_sessions.
    capabilities = CAPABILITIES - {WATCH_SESSIONS}

    @pytest.fixture
    def store(self, pg_url: str) -> Iterator[Store]:
        from memtap_postgres.store import PostgresStore

        s = PostgresStore(pg_url)
        yield s
        s.close()

    @pytest.fixture
    def peer_store(self, pg_url: str) -> Iterator[Store]:
        from memtap_postgres.store import PostgresStore

        s = PostgresStore(pg_url)
        yield s
        s.close()

    @pytest.fixture
    def reopen_store(self, pg_url: str) -> Iterator[Callable[[Store], Store]]:
        from memtap_postgres.store import PostgresStore

        opened: list[PostgresStore] = []

        def reopen(old: Store) -> Store:
            old.close()
            opened.append(PostgresStore(pg_url))
            return opened[-1]

        yield reopen
        for s in opened:
            s.close()


def _store(url: str) -> object:
    from memtap_postgres.store import PostgresStore

    return PostgresStore(url)


# -- migrations ----------------------------------------------------------------------------


def test_migrations_are_recorded_once(pg_url: str) -> None:
    from memtap_postgres.migrations import MIGRATIONS
    from memtap_postgres.store import PostgresStore

    first = PostgresStore(pg_url)
    assert first.applied_migrations == [m.name for m in MIGRATIONS]
    second = PostgresStore(pg_url)
    assert second.applied_migrations == []
    first.close()
    second.close()


_MIGRATE = """
import sys
from memtap_postgres.store import PostgresStore
s = PostgresStore(sys.argv[1])
print(len(s.applied_migrations))
s.close()
"""


def test_processes_starting_at_once_migrate_once(pg_url: str) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", _MIGRATE, pg_url], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    from memtap_postgres.migrations import MIGRATIONS

    assert sorted(outs) == ["0"] * 5 + [str(len(MIGRATIONS))]


def test_schema_has_tsvector_columns_and_gin_indexes(pg_url: str) -> None:
    import psycopg

    from memtap_postgres.store import PostgresStore

    store = PostgresStore(pg_url)
    store.add_facts([make_fact(1, text="Alice adopted two beagles")])
    store.write_exchanges([make_exchange(1, entity_id="alice")])
    base, schema = split_schema(pg_url)
    with psycopg.connect(base) as conn:
        indexes = {
            name
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = %s", [schema]
            ).fetchall()
        }
        hit = conn.execute(
            "SELECT count(*) FROM facts WHERE tsv @@ plainto_tsquery('english', 'beagle')"
        ).fetchone()
        msg = conn.execute(
            "SELECT count(*) FROM messages WHERE tsv @@ plainto_tsquery('english', 'answers')"
        ).fetchone()
    store.close()
    assert {"facts_tsv", "messages_tsv", "messages_entity_session", "facts_entity"} <= indexes
    assert hit == (1,)
    assert msg == (1,)


def test_nul_characters_do_not_poison_a_batch(pg_url: str) -> None:
    from memtap.protocol.model import Message
    from memtap_postgres.store import PostgresStore

    store = PostgresStore(pg_url)
    try:
        store.write_exchanges([make_exchange(1, input=(Message("user", "a\x00b"),))])
        assert store.history("s1")[0].content == "a\ufffdb"
    finally:
        store.close()


# -- errors --------------------------------------------------------------------------------


def test_server_down_says_to_start_it() -> None:
    with pytest.raises(StoreError, match=r"no PostgreSQL server answers at 127\.0\.0\.1:1"):
        _store("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2")


def test_missing_database_says_to_create_it() -> None:
    url = os.environ.get("MEMTAP_TEST_POSTGRES_URL") or pytest.skip("MEMTAP_TEST_POSTGRES_URL is not set")
    base = url.rsplit("/", 1)[0]
    with pytest.raises(StoreError, match="createdb"):
        _store(f"{base}/memtap_no_such_db_xyz")


def test_unknown_user_is_named() -> None:
    url = os.environ.get("MEMTAP_TEST_POSTGRES_URL") or pytest.skip("MEMTAP_TEST_POSTGRES_URL is not set")
    bad = url.replace("//postgres@", "//memtap_nobody:secret123@")
    if bad == url:
        pytest.skip("the test URL does not name the postgres user")
    with pytest.raises(StoreError, match="memtap_nobody") as info:
        _store(bad)
    assert "secret123" not in str(info.value)


def test_bad_schema_name_is_refused() -> None:
    with pytest.raises(StoreError, match="bad schema name"):
        split_schema("postgresql://h/db?schema=x;drop")


def test_password_is_never_shown() -> None:
    assert redact_url("postgresql://u:hunter2@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact_url("postgresql://h/db") == "postgresql://h/db"


def test_calls_fail_with_store_error_when_the_server_goes_away(pg_url: str) -> None:
    import psycopg

    from memtap_postgres.store import PostgresStore

    # Only this store's connections are ended (they carry a name of their own): the
    # server is shared with the other sessions' tests, which run at the same time in CI.
    name = f"memtap-goes-away-{uuid.uuid4().hex[:12]}"
    store = PostgresStore(f"{pg_url}&application_name={name}")
    try:
        store.write_exchanges([make_exchange(1)])
        base, _ = split_schema(pg_url)
        with psycopg.connect(base, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND state = 'idle'",
                [name],
            ).fetchone()
        assert ended is not None and ended[0] >= 1
        # the pool's broken connection is replaced: the next calls work again
        store.write_exchanges([make_exchange(2)])
        assert store.stats()["exchanges"] == 2
    finally:
        store.close()


# -- URLs and hooks ------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["memory://", "duckdb:///x.duckdb", "postgresqlx://h/db", "postgres:x"])
def test_other_schemes_are_declined(url: str) -> None:
    assert memtap_postgres.memtap_open_store(url) is None


def test_both_schemes_open(pg_url: str) -> None:
    for url in (pg_url, pg_url.replace("postgresql://", "postgres://", 1)):
        store = memtap_postgres.memtap_open_store(url)
        assert store is not None
        store.close()


def test_hooks_through_pluggy() -> None:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(memtap_postgres)
    assert pm.hook.memtap_store_schemes() == [["postgresql", "postgres"]]
    assert pm.hook.memtap_open_store(url="duckdb:///x") is None


def test_entry_point_is_declared() -> None:
    text = (PLUGIN_DIR / "pyproject.toml").read_text()
    assert 'name = "memtap-postgres"' in text
    section = text.split("[project.entry-points.memtap]", 1)[1].split("[", 1)[0]
    assert section.split() == ["postgres", "=", '"memtap_postgres"']


def test_importing_the_plugin_does_not_import_psycopg() -> None:
    code = "import sys, memtap_postgres; assert 'psycopg' not in sys.modules, 'psycopg imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())


# -- recall support ------------------------------------------------------------------------


def test_embeddings_round_trip_per_model(pg_url: str) -> None:
    from memtap_postgres.store import PostgresStore

    store = PostgresStore(pg_url)
    try:
        old = make_fact(1, text="Alice lives in Paris")
        new = make_fact(2, text="Alice lives in Tokyo", supersedes=old.id)
        other = make_fact(3, text="Bob has a beagle", entity_id="bob")
        store.add_facts([old, new, other])
        store.set_embeddings(
            {new.id: [0.5, -1.25, 2.0], old.id: [1.0, 0.0, 0.0], "unknown": [1.0]}, model="m1"
        )
        got = store.indexable_facts(entity_id="alice", model="m1")
        assert [(f, list(v) if v is not None else None) for f, v in got] == [(new, [0.5, -1.25, 2.0])]
        assert store.indexable_facts(entity_id="alice", model="m2") == [(new, None)]
        assert store.indexable_facts(entity_id="alice") == [(new, None)]
        store.set_embeddings({new.id: [9.0, 8.0]}, model="m2")  # replaced, other model
        assert store.indexable_facts(entity_id="alice", model="m1") == [(new, None)]
        assert [list(v or []) for _, v in store.indexable_facts(entity_id="alice", model="m2")] == [
            [9.0, 8.0]
        ]
        assert [f for f, _ in store.indexable_facts(entity_id="bob")] == [other]
        store.set_embeddings({}, model="m1")
    finally:
        store.close()
