"""Connection deadlines of the PostgreSQL store: defaults, the URL, the environment; what a
pooled connection really runs with (read back from the server and from libpq)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from memtap.storage.store import StoreError
from memtap_postgres.store import PostgresStore


@pytest.fixture
def opened() -> Iterator[Callable[[str], PostgresStore]]:
    stores: list[PostgresStore] = []

    def open_(url: str) -> PostgresStore:
        stores.append(PostgresStore(url))
        return stores[-1]

    yield open_
    for store in stores:
        store.close()


def _session(store: PostgresStore) -> dict[str, str]:
    """What a pooled connection runs with: server settings and libpq parameters."""
    with store._connection("inspecting") as conn:
        server = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("statement_timeout", "search_path")
        }
        libpq = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
    return {
        **server,
        **{
            k: libpq.get(k, "")
            for k in (
                "connect_timeout",
                "keepalives",
                "keepalives_idle",
                "keepalives_interval",
                "keepalives_count",
                "tcp_user_timeout",
            )
        },
    }


def test_defaults(
    opened: Callable[[str], PostgresStore], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("MEMTAP_PG_STATEMENT_TIMEOUT", raising=False)
    session = _session(opened(pg_url))
    assert session["statement_timeout"] == "30s"
    assert session["connect_timeout"] == "5"
    assert (session["keepalives"], session["keepalives_idle"], session["keepalives_interval"]) == (
        "1",
        "30",
        "10",
    )
    assert (session["keepalives_count"], session["tcp_user_timeout"]) == ("3", "30000")
    assert session["search_path"].startswith("memtap_test_")  # the schema's options are kept


def test_the_url_wins(
    opened: Callable[[str], PostgresStore], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_PG_STATEMENT_TIMEOUT", "9")
    store = opened(
        pg_url + "&connect_timeout=2&statement_timeout=1.5&keepalives_idle=7&tcp_user_timeout=1000"
    )
    session = _session(store)
    assert session["statement_timeout"] == "1500ms"
    assert (session["connect_timeout"], session["keepalives_idle"], session["tcp_user_timeout"]) == (
        "2",
        "7",
        "1000",
    )
    assert store.settings.connect_timeout == 2
    assert "statement_timeout" not in store.url.split("?", 1)[0]


def test_the_environment(
    opened: Callable[[str], PostgresStore], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_PG_STATEMENT_TIMEOUT", "2")
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "3")
    store = opened(pg_url)
    session = _session(store)
    assert session["statement_timeout"] == "2s"
    assert session["connect_timeout"] == "3"  # libpq's own variable, not overridden
    assert store.settings.connect_timeout == 3


def test_the_connect_timeout_argument_wins(opened: Callable[[str], PostgresStore], pg_url: str) -> None:
    store = opened(pg_url + "&connect_timeout=9")
    assert _session(store)["connect_timeout"] == "9"
    store = PostgresStore(pg_url + "&connect_timeout=9", connect_timeout=2)
    try:
        assert _session(store)["connect_timeout"] == "2"
        assert store.settings.connect_timeout == 2
    finally:
        store.close()


def test_zero_turns_the_statement_timeout_off(opened: Callable[[str], PostgresStore], pg_url: str) -> None:
    store = opened(pg_url + "&statement_timeout=0")
    assert _session(store)["statement_timeout"] == "0"
    assert store.settings.watchdog_limit is None


def test_a_bad_statement_timeout_says_what_to_give(pg_url: str) -> None:
    with pytest.raises(StoreError, match=r"bad statement_timeout 'soon'.*give seconds"):
        PostgresStore(pg_url + "&statement_timeout=soon")


def test_a_slow_statement_is_cancelled_by_the_server(
    opened: Callable[[str], PostgresStore], pg_url: str
) -> None:
    store = opened(pg_url + "&statement_timeout=0.3")
    started = time.monotonic()
    with pytest.raises(StoreError, match="statement timeout"):
        store._read("sleeping", "SELECT pg_sleep(10)")
    assert time.monotonic() - started < 2
    assert store.stats()["exchanges"] == 0  # the pool goes on
