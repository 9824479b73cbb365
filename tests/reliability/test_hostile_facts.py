"""Facts a store refuses never stop the others (issue 35, item 2): a fact written by
``remember`` or by memorize that the store refuses for what it holds (text it cannot
encode, a value its rows cannot be made of) is isolated from its batch by the capture
writer's own bisection (:mod:`memtap.capture.isolation`), kept in the quarantine, and the
facts around it are stored at once. Before, one such fact failed its whole batch: memorize
logged the failure and lost every episode of the batch."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_support import BACKENDS

import memtap
from memtap.errors import RecordRefusedError
from memtap.longterm.memorize import store_facts
from memtap.protocol.model import Fact

T0 = _dt.datetime(2024, 3, 1, 9, 0, tzinfo=_dt.timezone.utc)


@pytest.fixture
def memory(store_url: str, tmp_path: Path) -> Iterator[memtap.Memory]:
    mem = memtap.Memory(store_url, spool=tmp_path / "spool", embedder=False)
    yield mem
    mem.close()


def fact(text: str, n: int, entity: str, **kw: object) -> Fact:
    return Fact(entity_id=entity, text=text, created_at=T0 + _dt.timedelta(minutes=n), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_refused_facts_are_quarantined_and_the_others_stored_at_once(memory: memtap.Memory) -> None:
    entity = "hostile-facts"
    good = [fact(f"good fact number {i}", i, entity) for i in range(16)]
    bad = [
        fact("lone \ud800 surrogate", 20, entity),
        fact("metadata no row holds", 21, entity, metadata={"o": object()}),
    ]
    batch = [*good[:5], bad[0], *good[5:11], bad[1], *good[11:]]
    stored = store_facts(memory.store, batch, memory.quarantine)
    assert {f.id for f in stored} == {f.id for f in good}
    assert {f.id for f in memory.store.facts(entity_id=entity)} == {f.id for f in good}
    kept = memory.quarantine.facts()
    assert sorted(f.id for f, _ in kept) == sorted(f.id for f in bad)
    assert all(reason for _, reason in kept)
    assert memory.quarantine.count() == 2
    # Written again, the good ones are not held up: the refused ones are not retried.
    assert store_facts(memory.store, [fact("later fact", 30, entity)], memory.quarantine)


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_remember_of_a_refused_fact_says_so_and_keeps_it(memory: memtap.Memory) -> None:
    entity = "hostile-remember"
    with pytest.raises(RecordRefusedError, match="quarantine"):
        memory.remember("lone \ud800 surrogate", entity_id=entity)
    assert memory.quarantine.count() == 1
    memory.remember("Alice lives in Tokyo", entity_id=entity)
    assert [f.text for f in memory.store.facts(entity_id=entity)] == ["Alice lives in Tokyo"]
    assert "Tokyo" in memory.recall("where does alice live", entity_id=entity)[0].fact.text


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_memtap_quarantine_list_shows_refused_facts(memory: memtap.Memory, store_url: str) -> None:
    from click.testing import CliRunner

    from memtap.cli.main import main

    with pytest.raises(RecordRefusedError):
        memory.remember("lone \ud800 surrogate", entity_id="hostile-list")
    (kept,) = memory.quarantine.facts()
    memory.close()  # the command opens the store itself
    table = CliRunner().invoke(main, ["quarantine", "list", "--store", store_url], catch_exceptions=False)
    assert table.exit_code == 0 and "quarantined facts" in table.output
    assert "no quarantined" not in table.output
    listed = CliRunner().invoke(
        main, ["quarantine", "list", "--store", store_url, "--json"], catch_exceptions=False
    )
    (row,) = json.loads(listed.output)
    assert row["fact"]["id"] == kept[0].id and row["reason"]
