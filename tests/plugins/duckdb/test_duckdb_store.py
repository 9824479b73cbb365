"""DuckDBStore: the storage compliance suite (file and in-memory) plus DuckDB specifics."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import duckdb
import pluggy
import pytest

import memtap_duckdb
from memtap import hookspecs
from memtap.storage.store import Store, StoreError
from memtap.testing.storage_suite import (
    PERSISTENCE,
    StoreComplianceSuite,
    make_exchange,
    make_fact,
)
from memtap_duckdb.migrations import MIGRATIONS, Migration, apply_migrations
from memtap_duckdb.store import DuckDBStore

PLUGIN_DIR = Path(__file__).parents[3] / "plugins" / "duckdb"
MIGRATION_NAMES = [m.name for m in MIGRATIONS]


class TestDuckDBFileCompliance(StoreComplianceSuite):
    @pytest.fixture
    def path(self, tmp_path: Path) -> Path:
        return tmp_path / "memtap.duckdb"

    @pytest.fixture
    def store(self, path: Path) -> Iterator[Store]:
        s = DuckDBStore(path)
        yield s
        s.close()

    @pytest.fixture
    def reopen_store(self, path: Path) -> Iterator[Callable[[Store], Store]]:
        opened: list[DuckDBStore] = []

        def reopen(old: Store) -> Store:
            old.close()
            opened.append(DuckDBStore(path))
            return opened[-1]

        yield reopen
        for s in opened:
            s.close()


class TestDuckDBMemoryCompliance(StoreComplianceSuite):
    capabilities = StoreComplianceSuite.capabilities - {PERSISTENCE}

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        s = memtap_duckdb.memtap_open_store("duckdb:///:memory:")
        assert s is not None
        yield s
        s.close()


# -- migrations ----------------------------------------------------------------------------


def _ledger(path: Path) -> list[tuple[str, _dt.datetime]]:
    with duckdb.connect(str(path)) as conn:
        return conn.execute("SELECT name, applied_at FROM memtap_migrations ORDER BY name").fetchall()


def test_new_file_records_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    store = DuckDBStore(path)
    assert store.applied_migrations == MIGRATION_NAMES
    store.close()
    ledger = _ledger(path)
    assert [name for name, _ in ledger] == MIGRATION_NAMES
    assert all(applied_at.tzinfo is not None for _, applied_at in ledger)


def test_reopening_applies_nothing_new(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    DuckDBStore(path).close()
    before = _ledger(path)
    store = DuckDBStore(path)
    assert store.applied_migrations == []
    store.close()
    assert _ledger(path) == before


def test_only_unapplied_migrations_run(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    DuckDBStore(path).close()
    extra = Migration("9999_extra", ("CREATE TABLE extra (x INTEGER)",))
    with duckdb.connect(str(path)) as conn:
        assert apply_migrations(conn, (*MIGRATIONS, extra)) == ["9999_extra"]
        assert apply_migrations(conn, (*MIGRATIONS, extra)) == []
    assert [name for name, _ in _ledger(path)] == [*MIGRATION_NAMES, "9999_extra"]


def test_failing_migration_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    DuckDBStore(path).close()
    broken = Migration("9999_broken", ("CREATE TABLE half (x INTEGER)", "NOT SQL AT ALL"))
    with duckdb.connect(str(path)) as conn:
        with pytest.raises(duckdb.Error):
            apply_migrations(conn, (*MIGRATIONS, broken))
        tables = {t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "half" not in tables
    assert [name for name, _ in _ledger(path)] == MIGRATION_NAMES


def test_schema_has_the_documented_tables(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    DuckDBStore(path).close()
    with duckdb.connect(str(path)) as conn:
        columns = dict(
            conn.execute(
                "SELECT table_name || '.' || column_name, data_type FROM duckdb_columns()"
            ).fetchall()
        )
        indexes = {i for (i,) in conn.execute("SELECT index_name FROM duckdb_indexes()").fetchall()}
    assert columns["facts.embedding"] == "FLOAT[]"
    assert columns["exchanges.started_at"] == "TIMESTAMP WITH TIME ZONE"
    assert columns["exchanges.metadata"] == "JSON"
    assert columns["messages.tool_calls"] == "JSON"
    assert columns["sessions.updated_at"] == "TIMESTAMP WITH TIME ZONE"
    assert {"messages_entity_session", "facts_entity"} <= indexes


# -- DuckDB specifics ----------------------------------------------------------------------


def test_datetimes_come_back_in_utc() -> None:
    tokyo = _dt.timezone(_dt.timedelta(hours=9))
    ex = make_exchange(1)
    ex = attrs.evolve(ex, started_at=ex.started_at.astimezone(tokyo))
    store = DuckDBStore()
    try:
        store.write_exchanges([ex])
        store.add_facts([make_fact(1)])
        (got,) = store.exchanges()
        (message, _) = store.history("s1")
        (session,) = store.sessions()
        (fact,) = store.facts(entity_id="alice")
        stamps = [
            got.started_at,
            got.ended_at,
            message.created_at,
            session.created_at,
            session.updated_at,
            fact.created_at,
        ]
        assert all(d is not None and d.tzinfo is _dt.timezone.utc for d in stamps)
        assert got.started_at == ex.started_at
    finally:
        store.close()


def test_facts_embedding_starts_null(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    store = DuckDBStore(path)
    store.add_facts([make_fact(1)])
    store.close()
    with duckdb.connect(str(path)) as conn:
        assert conn.execute("SELECT embedding FROM facts").fetchall() == [(None,)]


def test_an_abandoned_export_does_not_block_writes_or_close() -> None:
    store = DuckDBStore()
    store.write_exchanges([make_exchange(i) for i in range(10)])
    export = store.exchanges()
    next(export)
    store.write_exchanges([make_exchange(20)])
    assert store.stats()["exchanges"] == 11
    store.close()
    with pytest.raises(StoreError, match="closed"):
        list(export)


# -- URLs and hooks ------------------------------------------------------------------------


def test_relative_url_creates_parent_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = "duckdb:///data/sub/memtap.duckdb"
    store = memtap_duckdb.memtap_open_store(url)
    assert isinstance(store, DuckDBStore)
    try:
        assert store.url == url
        assert store.path == "data/sub/memtap.duckdb"
    finally:
        store.close()
    assert (tmp_path / "data" / "sub" / "memtap.duckdb").is_file()


def test_four_slashes_mean_an_absolute_path(tmp_path: Path) -> None:
    target = tmp_path / "abs" / "memtap.duckdb"
    url = f"duckdb:///{target}"  # the path starts with "/", so this has four slashes
    assert url.startswith("duckdb:////")
    store = memtap_duckdb.memtap_open_store(url)
    assert isinstance(store, DuckDBStore)
    store.close()
    assert target.is_file()


def test_memory_url_is_private_to_each_store() -> None:
    first = memtap_duckdb.memtap_open_store("duckdb:///:memory:")
    second = memtap_duckdb.memtap_open_store("duckdb:///:memory:")
    assert isinstance(first, DuckDBStore) and isinstance(second, DuckDBStore)
    try:
        first.write_exchanges([make_exchange(1)])
        assert second.stats()["exchanges"] == 0
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    "url",
    ["memory://", "postgresql://localhost/test", "sqlite:///x.db", "duckdbx:///x", "x.duckdb"],
)
def test_other_schemes_are_declined(url: str) -> None:
    assert memtap_duckdb.memtap_open_store(url) is None


@pytest.mark.parametrize("url", ["duckdb:", "duckdb://host/x.duckdb", "duckdb:///", "duckdb:x"])
def test_malformed_duckdb_urls_say_how_to_write_one(url: str) -> None:
    with pytest.raises(StoreError, match=r"duckdb:///relative/path\.duckdb"):
        memtap_duckdb.memtap_open_store(url)


def test_hooks_through_pluggy(tmp_path: Path) -> None:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(memtap_duckdb)
    assert pm.hook.memtap_store_schemes() == [["duckdb"]]
    assert pm.hook.memtap_open_store(url="postgresql://x/y") is None
    store = pm.hook.memtap_open_store(url=f"duckdb:///{tmp_path / 'p.duckdb'}")
    assert isinstance(store, DuckDBStore)
    store.close()


def test_entry_point_is_declared() -> None:
    text = (PLUGIN_DIR / "pyproject.toml").read_text()  # tomllib is 3.11+; we support 3.10
    assert 'name = "memtap-duckdb"' in text
    section = text.split("[project.entry-points.memtap]", 1)[1].split("[", 1)[0]
    assert section.split() == ["duckdb", "=", '"memtap_duckdb"']


def test_importing_the_plugin_does_not_import_duckdb() -> None:
    code = "import sys, memtap_duckdb; assert 'duckdb' not in sys.modules, 'duckdb imported'"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())


# -- opening errors ------------------------------------------------------------------------

_HOLDER = "import sys, duckdb; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); sys.stdin.read()"


def test_file_held_by_another_process_gives_advice(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError) as info:
            DuckDBStore(path)
        message = str(info.value)
        assert str(path) in message
        assert f"process {holder.pid} has it open" in message  # who holds it
        assert "one read-write process per file" in message
        assert "IO Error" not in message  # DuckDB's raw text is not the message
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        try:
            holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
    DuckDBStore(path).close()  # free again once the holder is gone


def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    path = tmp_path / "notes.duckdb"
    path.write_text("not a database\n" * 100)
    with pytest.raises(StoreError, match="not a DuckDB database") as info:
        DuckDBStore(path)
    assert str(path) in str(info.value)


def test_unwritable_directory_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="directory") as info:
        DuckDBStore(blocker / "sub" / "m.duckdb")
    assert str(blocker / "sub" / "m.duckdb") in str(info.value)


def test_two_stores_on_one_file_in_one_process_share_writes(tmp_path: Path) -> None:
    # DuckDB hands both the same database; their writers must not conflict.
    first, second = DuckDBStore(tmp_path / "m.duckdb"), DuckDBStore(tmp_path / "m.duckdb")
    try:

        def write(t: int) -> None:
            store = first if t % 2 else second
            for b in range(10):
                store.write_exchanges([make_exchange(t * 100 + b, session_id="same")])

        with ThreadPoolExecutor(8) as pool:
            for future in [pool.submit(write, t) for t in range(8)]:
                future.result()
        assert first.stats()["exchanges"] == second.stats()["exchanges"] == 80
        assert first.sessions()[0].exchange_count == 80
    finally:
        first.close()
        second.close()


def test_a_store_made_before_explain_is_migrated_and_its_exchanges_read(tmp_path: Path) -> None:
    """A file written before ``exchanges.injected`` existed gains the column on open; its
    exchanges read back with nothing injected, and new ones keep their record."""
    from memtap.testing.storage_suite import injected_blocks

    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as conn:
        apply_migrations(conn, MIGRATIONS[:2])
        conn.execute(
            "INSERT INTO exchanges (id, seq, entity_id, session_id, provider, operation, stream, status,"
            " finish_reasons, input_count, started_at, ended_at) VALUES"
            " ('old1', 1, 'alice', 's1', 'openai', 'chat', false, 'ok', [], 0, now(), now())"
        )
    store = DuckDBStore(path)
    try:
        assert store.applied_migrations == ["0003_exchange_injected"]
        old = store.exchange("old1")
        assert old is not None and old.injected == ()
        new = make_exchange(5, injected=injected_blocks())
        store.write_exchanges([new])
        assert store.exchange(new.id).injected == injected_blocks()
    finally:
        store.close()
