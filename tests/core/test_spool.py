"""The durable spool on its own: segments, ownership, bound, corruption, redaction."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from memtap.capture.spool import (
    RequestJournal,
    Spool,
    encode_head,
    encode_record,
    encode_tail,
    journal_call,
    journal_request,
    spool_dir_for,
)
from memtap.protocol.model import Attribution
from memtap.redact import dumps_redacted
from memtap.storage.store import InMemoryStore, store_identity


def _record(i: int, text: str = "hello") -> bytes:
    return encode_record(
        call_id=f"id{i}",
        protocol="test.chat",
        attribution=Attribution(entity_id="alice", session_id="s1"),
        started_at="2025-01-01T00:00:00+00:00",
        ended_at="2025-01-01T00:00:01+00:00",
        already_present=0,
        stream=False,
        error=None,
        partial=False,
        body={"messages": [{"role": "user", "content": f"{text} {i}"}]},
        response='{"choices":[]}',
        events=None,
    )


def test_a_record_is_one_json_line_with_secrets_redacted() -> None:
    line = _record(1, "my key is sk-proj-abcdefghijklmnopqrstuvwxyz")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    data = json.loads(line)
    assert data["req"]["messages"][0]["content"] == "my key is [REDACTED] 1"
    assert data["res"] == {"choices": []} and data["ev"] is None and data["id"] == "id1"


def test_stored_segments_are_deleted_and_live_ones_are_not_adopted(tmp_path: Path) -> None:
    live = Spool(tmp_path, segment_bytes=1024)
    segs = [live.append(_record(i)) for i in range(20)]
    assert all(s is not None for s in segs)
    other = Spool(tmp_path)
    assert list(other.adopt_orphans()) == []  # flock-ed by a live owner
    live.done(segs[:10])
    assert live.pending() == 10
    live.close()  # the unstored 10 stay on disk
    adopted = list(other.adopt_orphans())
    assert [r["id"] for _, r in adopted] == [f"id{i}" for i in range(10, 20)]
    other.done([seg for seg, _ in adopted])
    other.close()
    assert list(tmp_path.glob("*.jsonl")) == []


def test_bound_drops_oldest_segments_and_counts_them(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    segs = [spool.append(_record(i)) for i in range(100)]
    assert spool.stats.dropped > 0
    assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) <= 4096
    assert sum(1 for s in segs if s is not None and s.dropped) == spool.stats.dropped
    spool.close()


def test_a_segment_being_written_is_not_dropped_until_the_write_ends(tmp_path: Path) -> None:
    """Oldest first, but never a call under way to the store: the bound waits for the
    write (:meth:`Spool.pin`), then is kept again, counting only what the store has not."""
    spool = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    first = [spool.append(_record(i)) for i in range(5)]
    spool.pin(first)
    later = [spool.append(_record(i)) for i in range(5, 100)]
    assert spool.stats.dropped == 0 and not any(s.dropped for s in first if s is not None)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) > 4096  # held while pinned
    spool.stored(first)  # the write stored them (memorize not done yet)
    spool.unpin(first)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) <= 4096
    # The stored five went with their segment, uncounted: only calls never stored count.
    lost = [s for s in later if s is not None and s.dropped]
    assert spool.stats.dropped == len(lost) > 0
    spool.close()


def test_records_stored_but_not_done_are_not_counted_when_dropped(tmp_path: Path) -> None:
    """A segment dropped for the bound while memorize still works on calls the store has:
    only its calls never stored count as dropped."""
    spool = Spool(tmp_path, max_bytes=4096, segment_bytes=1024)
    segs = [spool.append(_record(i)) for i in range(5)]
    spool.stored(segs[:3])  # stored, memorize not done with them; the other two never stored
    segs += [spool.append(_record(i)) for i in range(5, 100)]
    gone = {id(s): s for s in segs if s is not None and s.dropped}
    assert segs[0] is not None and segs[0].dropped
    assert spool.stats.dropped == sum(s.records for s in gone.values()) - 3
    spool.done(segs[:3], stored=True)  # memorize done after the drop: nothing left to do
    assert spool.stats.dropped == sum(s.records for s in gone.values()) - 3
    spool.close()


def test_corrupted_lines_are_skipped_with_a_warning(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "0001-1-000001.jsonl").write_bytes(_record(1) + b"garbage\n" + _record(2) + _record(3)[:20])
    spool = Spool(tmp_path)
    assert [r["id"] for _, r in spool.adopt_orphans()] == ["id1", "id2"]
    assert spool.stats.corrupt == 2
    assert sum("is corrupted" in r.getMessage() for r in caplog.records) == 2
    spool.close()


class _UrlOnlyStore:
    """A third-party store without identity(): only its URL is known."""

    def __init__(self, url: str) -> None:
        self.url = url


def test_where_the_spool_lives() -> None:
    assert store_identity(InMemoryStore()) is None
    assert store_identity(_UrlOnlyStore("duckdb:///:memory:")) is None  # type: ignore[arg-type]
    identity = store_identity(_UrlOnlyStore("postgresql://u:secret@h/db?password=also"))  # type: ignore[arg-type]
    assert identity == "postgresql://u@h/db"
    # Without identity(), a rotated password still finds the same spool.
    assert identity == store_identity(_UrlOnlyStore("postgresql://u:rotated@h/db"))  # type: ignore[arg-type]
    a = spool_dir_for(identity, Path("/home"))
    assert "secret" not in str(a) and a.parent == Path("/home/spool")
    assert a != spool_dir_for("postgresql://u@h/other", Path("/home"))


# -- the request half, made off the request path ---------------------------------------


class _Protocol:
    name = "openai.chat"


class _FakeCall:
    """What journaling reads from a :class:`memtap.request.tap.Call`."""

    id = "call-1"
    attribution = Attribution(entity_id="alice", session_id="s1")
    started_at = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
    already_present = 2
    resent_later: tuple[object, ...] = ()
    protocol = _Protocol()


def test_the_request_half_is_encoded_once_whoever_comes_first() -> None:
    calls: list[int] = []
    job = RequestJournal({"a": 1}, lambda: calls.append(1) or b"head")
    job.run()
    job.run()
    assert job.data() == b"head" and calls == [1]
    failing = RequestJournal({}, lambda: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(ValueError):
        failing.data()


def test_the_journal_worker_encodes_the_request_while_the_call_is_in_flight(tmp_path: Path) -> None:
    secret = "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78"
    new = f"{os.urandom(8).hex()} new text never seen " * 200  # enough to be worth the worker
    body = {"messages": [{"role": "user", "content": f"{new}\n{secret}"}], "password": "Tr0ub4dor&3"}
    job = journal_request(Spool(tmp_path), _FakeCall(), body)
    assert job is not None
    deadline = time.monotonic() + 10
    while job._data is None and time.monotonic() < deadline:  # nobody asks: the worker does it
        time.sleep(0.01)
    head = job.data()
    assert secret.encode() not in head and b"Tr0ub4dor" not in head
    record = json.loads(head + b',"t1":null,"s":false,"e":null,"pa":false,"res":null,"ev":null}')
    assert record["req"]["password"] == "[REDACTED]" and record["id"] == "call-1"


@pytest.mark.parametrize("ahead", [False, True], ids=["small-body", "body-encoded-ahead"])
@pytest.mark.parametrize("deferred", [False, True], ids=["counted", "left-to-the-writer"])
def test_the_resent_count_is_journaled_with_the_response_half(
    tmp_path: Path, deferred: bool, ahead: bool
) -> None:
    """The request half is encoded while the call is in flight (or, for a small body, with
    the response half); what the request resends is journaled when the call ends: the
    count, or null when it is made where the call is formatted (history off), to be made
    again if the record is replayed."""
    spool = Spool(tmp_path)
    call = _FakeCall()
    call.already_present = 0
    content = f"{os.urandom(8).hex()} new text never seen " * 200 if ahead else "hello"
    body = {"messages": [{"role": "user", "content": content}]}
    job = journal_request(spool, call, body)
    assert (job is not None) == ahead
    if job is not None:
        job.run()  # the request half, encoded while the call was in flight
    call.journal = job  # type: ignore[attr-defined]
    call.already_present = 3
    call.resent_later = (lambda: 3,) if deferred else ()
    ended = datetime.datetime(2025, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc)
    segment = journal_call(
        spool, call, body, ended, lambda: ('{"choices": []}', None), error=None, partial=False, stream=False
    )
    assert segment is not None
    (line,) = [json.loads(x) for x in segment.path.read_text().splitlines()]
    assert line["ap"] == (None if deferred else 3) and line["req"] == body


def test_a_forked_child_journals_with_its_own_worker(tmp_path: Path) -> None:
    journal_request(
        Spool(tmp_path / "parent"), _FakeCall(), {"x": os.urandom(8).hex() * 800}
    )  # a worker runs
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child_journals, args=(str(tmp_path / "child"),))
    child.start()
    child.join(30)
    assert child.exitcode == 0


def _child_journals(directory: str) -> None:
    job = journal_request(Spool(directory), _FakeCall(), {"x": os.urandom(8).hex() * 800})
    assert job is not None
    deadline = time.monotonic() + 10
    while job._data is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0 if job._data is not None else 1)


@pytest.mark.parametrize("known", [False, True], ids=["small", "known"])
def test_a_small_or_known_body_is_encoded_when_the_answer_comes(tmp_path: Path, known: bool) -> None:
    """Not handed to the worker: the whole record is encoded in one piece at the end, the
    same record as the two halves make."""
    spool = Spool(tmp_path)
    call = _FakeCall()
    secret = "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78"
    content = f"{os.urandom(8).hex()} text seen before " * 200 if known else f"hi {secret}"
    if known:
        dumps_redacted({"seen": content})  # scanned and encoded by an earlier call
    body = {"messages": [{"role": "user", "content": content}], "password": "Tr0ub4dor&3"}
    assert journal_request(spool, call, body) is None
    call.journal = None  # type: ignore[attr-defined]
    ended = datetime.datetime(2025, 1, 1, 0, 0, 1, tzinfo=datetime.timezone.utc)
    answer = '{"choices":[{"message":{"content":"' + secret + '"}}]}'
    segment = journal_call(
        spool, call, body, ended, lambda: (answer, None), error=None, partial=False, stream=False
    )
    assert segment is not None
    raw = segment.path.read_bytes()
    assert secret.encode() not in raw and b"Tr0ub4dor" not in raw
    head = encode_head(
        call_id=call.id,
        protocol="openai.chat",
        attribution=call.attribution,
        started_at=call.started_at.isoformat(),
        body=body,
    )
    tail = encode_tail(
        ended_at=ended.isoformat(),
        stream=False,
        error=None,
        partial=False,
        response=answer,
        events=None,
        already_present=2,
    )
    assert json.loads(raw) == json.loads(head + tail)
    assert json.loads(raw)["req"]["messages"][0]["content"].startswith(
        "hi [REDACTED]" if not known else content[:20]
    )
