"""`memtap export` / `memtap import`: DuckDB -> PostgreSQL -> JSONL loses nothing."""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from reliability_support import BACKENDS, pg_base_url, with_schema

import memtap
from memtap.cli.main import main
from memtap.protocol.model import Attribution, Exchange, Message, ToolCall, Usage
from memtap.testing.storage_suite import make_exchange, make_fact


def _rich_exchange() -> Exchange:
    tokyo = _dt.timezone(_dt.timedelta(hours=9))
    return Exchange(
        attribution=Attribution(entity_id="alice", session_id="s1", process_id="bot"),
        provider="openai",
        operation="chat",
        input=(Message("user", 'Weather in 東京? 🌧 "q" \\ back\nslash', name="al"),
               Message("tool", '{"temp": 12}', tool_call_id="call_0")),
        output=(Message("assistant", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Tokyo"}'),)),),
        system="You are terse.",
        request_model="gpt-x",
        response_model="gpt-x-2025",
        usage=Usage(input_tokens=120, output_tokens=30, cached_input_tokens=100),
        finish_reasons=("tool_calls",),
        stream=True,
        status="partial",
        error="cut",
        started_at=_dt.datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=tokyo),
        ended_at=_dt.datetime(2025, 3, 4, 5, 6, 9, 123456, tzinfo=tokyo),
        metadata={"request_id": "req_1", "note": "ünïcode ✓"},
    )  # fmt: skip


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_duckdb_to_postgresql_to_jsonl_round_trip(store_url: str, tmp_path: Path) -> None:
    pg_base_url()
    duck = f"duckdb:///{tmp_path / 'src.duckdb'}"
    exchanges = [_rich_exchange()] + [
        make_exchange(i, entity_id=f"e{i % 3}", session_id=f"s{i % 4}") for i in range(1, 300)
    ]
    old = make_fact(1, text="Alice lives in Paris")
    facts = [old, make_fact(2, text="Alice lives in Tokyo", supersedes=old.id),
             make_fact(3, entity_id="e1", text="likes tea", metadata={"k": "v"})]  # fmt: skip
    src = memtap.Memory(duck, spool=False)
    src.store.write_exchanges(exchanges)
    src.store.add_facts(facts)
    src_stats = src.store.stats()
    src.close()

    runner = CliRunner()
    first, second = tmp_path / "duck.jsonl", tmp_path / "pg.jsonl"
    result = runner.invoke(main, ["export", "--store", duck, "-o", str(first)])
    assert result.exit_code == 0, result.output
    for _ in range(2):  # importing twice changes nothing
        result = runner.invoke(main, ["import", "--store", store_url, str(first)])
        assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["export", "--store", store_url, "-o", str(second)])
    assert result.exit_code == 0, result.output

    a, b = _records(first), _records(second)
    assert a == b  # every record, field by field
    assert a[0] == {"type": "memtap-export", "version": 1}
    assert [r["type"] for r in a[1:]].count("exchange") == 300
    assert [r["type"] for r in a[1:]].count("fact") == 3
    with memtap.Memory(store_url, spool=False) as pg:
        assert list(pg.store.exchanges()) == sorted(exchanges, key=lambda e: e.started_at)
        stored_facts = pg.store.facts(entity_id="alice", include_superseded=True)
        assert {f.id: f.superseded_by for f in stored_facts} == {old.id: facts[1].id, facts[1].id: None}
        assert pg.stats() == src_stats


def test_import_rejects_a_file_that_is_not_an_export(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    result = CliRunner().invoke(main, ["import", "--store", f"duckdb:///{tmp_path / 'x.duckdb'}", str(bad)])
    assert result.exit_code != 0
    assert "not a memtap export" in result.output


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_facts_of_an_entity_without_sessions_are_exported(store_url: str, tmp_path: Path) -> None:
    with memtap.Memory(store_url, spool=False) as mem:
        lonely = mem.remember("Lonely likes jazz", entity_id="lonely")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(main, ["export", "--store", store_url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    facts = [r["data"] for r in _records(out) if r["type"] == "fact"]
    assert [f["id"] for f in facts] == [lonely.id]


@pytest.mark.parametrize("target", BACKENDS)
@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_export_then_import_round_trips_every_fact(store_url: str, target: str, tmp_path: Path) -> None:
    """Facts of entities with and without sessions, superseded ones and tombstones, remembered
    and learned: all of them, on every backend pair."""
    if target == "postgres":
        pg_base_url()
    with memtap.Memory(store_url, spool=False) as src:
        src.store.write_exchanges([make_exchange(1, entity_id="talker")])
        old = make_fact(1, entity_id="talker", text="Talker lives in Paris")
        src.store.add_facts(
            [
                old,
                make_fact(2, entity_id="talker", text="Talker lives in Tokyo", supersedes=old.id),
                make_fact(3, entity_id="talker", text="x", kind="tombstone", supersedes="gone"),
                make_fact(4, entity_id="silent", text="Silent likes tea", kind="episode"),
            ]
        )
        src.remember("Remembered without a session", entity_id="noted")
        expected = {e: src.store.facts(entity_id=e, include_superseded=True) for e in src.store.entities()}
    assert sorted(expected) == ["noted", "silent", "talker"]
    out = tmp_path / "export.jsonl"
    result = CliRunner().invoke(main, ["export", "--store", store_url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    if target == "duckdb":
        target_url = f"duckdb:///{tmp_path / 'target.duckdb'}"
    else:
        target_url = with_schema(pg_base_url(), f"memtap_rt_{uuid.uuid4().hex[:12]}")
    try:
        result = CliRunner().invoke(main, ["import", "--store", target_url, str(out)])
        assert result.exit_code == 0, result.output
        with memtap.Memory(target_url, spool=False) as dst:
            assert dst.store.entities() == sorted(expected)
            for entity, facts in expected.items():
                assert dst.store.facts(entity_id=entity, include_superseded=True) == facts
    finally:
        if target != "duckdb":
            import psycopg

            with psycopg.connect(pg_base_url(), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{target_url.rsplit("schema=", 1)[1]}" CASCADE')
