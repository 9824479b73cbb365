"""The durable spool on its own: segments, ownership, bound, corruption, redaction."""

from __future__ import annotations

import json
from pathlib import Path

from memtap.model import Attribution
from memtap.spool import Spool, encode_record, spool_dir_for
from memtap.storage import InMemoryStore, store_identity


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
