"""One record a store refuses never stops the others (memtap.capture.writer with
memtap.capture.quarantine): the refused record is isolated from its batch and quarantined,
redacted; the rest of the batch is stored at once; a store that is down is still retried.
Against a real DuckDB file, wrapped to refuse what a stricter backend would."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from memtap.capture.quarantine import Quarantine
from memtap.capture.writer import CapturedCall, CaptureWriter
from memtap.errors import RecordRefusedError, StoreError
from memtap.protocol.model import Attribution, Exchange, Message, ToolCall
from memtap.storage.storable import storable
from memtap_duckdb.store import DuckDBStore

SECRET = "sk-proj-POISONsecret0123456789abcdefABCDEF"


def exchange(i: int, text: str | None = None, **attribution: str) -> Exchange:
    return Exchange(
        attribution=Attribution(**({"entity_id": "alice", "session_id": f"s{i % 3}"} | attribution)),
        provider="test",
        operation="chat",
        input=[Message(role="user", content=text if text is not None else f"message {i}")],
        output=[Message(role="assistant", content=f"reply {i}")],
        id=f"ex{i:04d}",
    )


class RefusingStore:
    """A real DuckDB store that refuses (``error``) every batch holding a record ``bad``
    says is bad, as a backend refuses a value it cannot hold; ``down`` fails everything."""

    def __init__(self, path: Path, bad: Callable[[Exchange], bool], error: type[Exception]) -> None:
        self.inner = DuckDBStore(path)
        self.bad = bad
        self.error = error
        self.down = threading.Event()
        self.writes = 0
        self.refusals = 0

    def write_exchanges(self, exchanges: Sequence[Exchange]) -> None:
        self.writes += 1
        if self.down.is_set():
            raise StoreError("store is down (injected)")
        if any(self.bad(ex) for ex in exchanges):
            self.refusals += 1
            raise self.error("value refused (injected)")
        self.inner.write_exchanges(exchanges)

    def probe(self) -> None:
        """A cheap read: fails while the store is down."""
        if self.down.is_set():
            raise StoreError("store is down (injected)")
        self.inner.exchange("probe")

    def ids(self) -> set[str]:
        return {ex.id for ex in self.inner.exchanges()}


def is_marked(ex: Exchange) -> bool:
    return "POISON" in ex.input[0].content


def writer_for(store: RefusingStore, tmp_path: Path, **kwargs) -> CaptureWriter:
    kwargs.setdefault("probe", store.probe)
    return CaptureWriter(
        store.write_exchanges,
        retry_initial=0.001,
        retry_max=0.01,
        quarantine=Quarantine(tmp_path / "quarantine"),
        **kwargs,
    )


def submit_all(writer: CaptureWriter, exchanges: Sequence[Exchange]) -> None:
    for ex in exchanges:
        writer.submit(CapturedCall(lambda ex=ex: ex))


@pytest.mark.parametrize("error", [RecordRefusedError, ValueError, RuntimeError], ids=lambda e: e.__name__)
@pytest.mark.parametrize("bad_at", [[0], [7], [19], [3, 4], [0, 10, 19]], ids=str)
def test_refused_records_are_quarantined_and_the_rest_stored_in_one_round(
    tmp_path: Path, error: type[Exception], bad_at: list[int]
) -> None:
    # Whatever the error says (a classified refusal, or an error memtap cannot classify),
    # a record that fails while the rest of its batch goes through is isolated.
    store = RefusingStore(tmp_path / "m.duckdb", is_marked, error)
    gate = threading.Event()
    writer = CaptureWriter(
        lambda batch: (gate.wait(5), store.write_exchanges(batch))[1],
        retry_initial=0.001,
        retry_max=0.01,
        quarantine=Quarantine(tmp_path / "quarantine"),
        probe=store.probe,
    )
    exchanges = [exchange(i, f"POISON {i} key {SECRET}" if i in bad_at else None) for i in range(20)]
    submit_all(writer, exchanges)
    gate.set()
    assert writer.flush(10)
    good = {ex.id for ex in exchanges} - {f"ex{i:04d}" for i in bad_at}
    assert store.ids() == good
    assert writer.stats.written == len(good)
    assert writer.stats.quarantined == len(bad_at)
    kept = list(writer.quarantine.records())
    assert sorted(r.exchange.id for r in kept) == sorted(f"ex{i:04d}" for i in bad_at)
    on_disk = "".join(p.read_text() for p in (tmp_path / "quarantine").iterdir())
    assert SECRET not in on_disk and "POISON" in on_disk  # redacted, and still inspectable
    assert all(os.stat(p).st_mode & 0o777 == 0o600 for p in (tmp_path / "quarantine").iterdir())
    writer.close()


def test_good_records_behind_a_refused_one_are_not_delayed(tmp_path: Path) -> None:
    # Before: the refused batch was held and retried forever, and nothing behind it stored.
    store = RefusingStore(tmp_path / "m.duckdb", is_marked, RecordRefusedError)
    writer = writer_for(store, tmp_path)
    submit_all(writer, [exchange(0, "POISON")])
    for i in range(1, 11):
        submit_all(writer, [exchange(i)])
        assert writer.flush(5), f"call {i} was not stored behind the refused one"
        assert f"ex{i:04d}" in store.ids()
    assert writer.quarantine.count() == 1
    writer.close()


@pytest.mark.parametrize("probe", [True, False], ids=["probe", "no probe"])
def test_an_unclassified_failure_of_a_lone_record_is_held_until_the_store_proves_alive(
    tmp_path: Path, probe: bool
) -> None:
    # A lone record failing with an error memtap cannot classify may be a store that is
    # down (or a full disk: reads work, writes fail): it is held (retried), and isolated
    # as soon as a good record goes through.
    store = RefusingStore(tmp_path / "m.duckdb", is_marked, RuntimeError)
    writer = writer_for(store, tmp_path, probe=store.probe if probe else None)
    submit_all(writer, [exchange(0, "POISON")])
    assert writer.flush(0.2) is False
    assert writer.quarantine.count() == 0
    submit_all(writer, [exchange(1)])
    assert writer.flush(5)
    assert store.ids() == {"ex0001"}
    assert [r.exchange.id for r in writer.quarantine.records()] == ["ex0000"]
    writer.close()


@pytest.mark.parametrize("probe", [True, False], ids=["probe", "no probe"])
def test_a_store_that_is_down_is_retried_not_quarantined(tmp_path: Path, probe: bool) -> None:
    store = RefusingStore(tmp_path / "m.duckdb", is_marked, RecordRefusedError)
    store.down.set()
    writer = writer_for(store, tmp_path, probe=store.probe if probe else None)
    submit_all(writer, [exchange(i) for i in range(50)])
    assert writer.flush(0.3) is False
    assert writer.quarantine.count() == 0
    writes_while_down = store.writes
    store.down.clear()
    assert writer.flush(5)
    assert len(store.ids()) == 50
    assert writer.quarantine.count() == 0
    # Down: each retry is the batch (and its two halves without a probe), not a write per
    # record.
    rounds = writes_while_down // (1 if probe else 3)
    assert writer.stats.write_failures <= (1 if probe else 3) * (rounds + 1)
    assert writes_while_down == writer.stats.write_failures
    writer.close()


def test_quarantine_retry_and_drop(tmp_path: Path) -> None:
    store = RefusingStore(tmp_path / "m.duckdb", is_marked, RecordRefusedError)
    writer = writer_for(store, tmp_path)
    submit_all(writer, [exchange(0, "POISON a"), exchange(1, "POISON b"), exchange(2)])
    assert writer.flush(5)
    quarantine = writer.quarantine
    assert quarantine.count() == 2
    assert quarantine.retry(store) == (0, 2)  # still refused: they stay
    store.bad = lambda ex: False
    assert quarantine.retry(store, ["ex0000"]) == (1, 0)
    assert store.ids() == {"ex0000", "ex0002"}
    assert quarantine.drop() == 1
    assert quarantine.count() == 0
    writer.close()


CORPUS = {
    "lone high surrogate": "bad \ud800 text",
    "lone low surrogate": "bad \udfff text",
    "reversed pair": "\udc00\ud800",
    "surrogate at the end": "end \udbff",
}


@pytest.mark.parametrize("text", CORPUS.values(), ids=CORPUS.keys())
def test_lone_surrogates_anywhere_are_made_storable_in_a_real_duckdb_file(tmp_path: Path, text: str) -> None:
    store = DuckDBStore(tmp_path / "m.duckdb")
    hostile = Exchange(
        attribution=Attribution(entity_id=f"e{text}", session_id=f"s{text}", process_id=text),
        provider="test",
        operation="chat",
        input=[Message(role="user", content=text, name=text)],
        output=[Message(role="assistant", tool_calls=[ToolCall(id=text, name=text, arguments=text)])],
        system=text,
        metadata={text: text},
        id=f"id{text}",
    )
    with pytest.raises(StoreError):  # what the store does with it as it is
        store.write_exchanges([hostile])
    store.write_exchanges([storable(hostile)])
    (back,) = list(store.exchanges())
    a = back.attribution
    texts = [back.input[0].content, a.entity_id, a.session_id, back.id, back.metadata, back.system]
    dumped = json.dumps(texts)
    assert "\\ud8" not in dumped.lower() and "\\udb" not in dumped.lower() and "\\udc" not in dumped.lower()
    assert "\\ufffd" in dumped
    assert back.output[0].tool_calls[0].arguments == storable(text)
    store.close()


def test_storable_keeps_proper_text_as_it_is() -> None:
    fine = exchange(1, "emoji 😀, accents é, CJK 漢字, NUL \x00 kept where the store holds it")
    assert storable(fine) is fine
    assert storable("a\x00b", "\x00") == "a\ufffdb"
    assert storable("\ud83d\ude00 \ud800") == "😀 \ufffd"  # a pair left as two halves is joined
