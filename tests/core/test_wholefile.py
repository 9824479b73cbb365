"""Files published whole (``memtap.sdk.publish_atomically``): a reader sees the old file, the
new one or none; what a killed writer left is removed by a later one; the quarantine's
records go through it."""

from __future__ import annotations

import os
import stat
import time

import pytest

from memtap.capture.quarantine import Quarantine
from memtap.protocol.model import Attribution, Exchange, Message
from memtap.sdk import STALE_WORK_SECONDS, publish_atomically, remove_stale_work


def test_a_file_is_published_whole_with_its_mode_and_no_work_file_left(tmp_path):
    target = tmp_path / "model.onnx"
    publish_atomically(target, lambda f: f.write(b"weights"), mode=0o644)
    assert target.read_bytes() == b"weights"
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_a_write_that_fails_leaves_the_old_file_and_no_work_file(tmp_path):
    target = tmp_path / "table.npy"
    target.write_bytes(b"old")

    def failing(f):
        f.write(b"half of it")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_atomically(target, failing)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.npy"]


def test_only_work_files_older_than_a_live_write_are_removed(tmp_path):
    dead, live, other = tmp_path / ".a.npy.x1.work", tmp_path / ".a.npy.x2.work", tmp_path / "kept.work"
    for path in (dead, live, other):
        path.write_bytes(b"")
    old = time.time() - STALE_WORK_SECONDS - 1
    for path in (dead, other):
        os.utime(path, (old, old))
    remove_stale_work(tmp_path)
    assert not dead.exists() and live.exists() and other.exists()


def _exchange(text: str) -> Exchange:
    return Exchange(
        attribution=Attribution(entity_id="e", session_id="s"),
        provider="openai",
        operation="chat",
        input=[Message(role="user", content=text)],
        output=[Message(role="assistant", content="ok")],
    )


def test_a_quarantined_record_is_published_whole_and_private(tmp_path):
    """A record is one file its owner alone reads, never a half-written one; a work file a
    killed process left behind is removed by the next record, and never listed."""
    folder = tmp_path / "quarantine"
    folder.mkdir(mode=0o700)
    left = folder / ".x.json.abc123.work"
    left.write_bytes(b'{"v": 1, "half')
    old = time.time() - STALE_WORK_SECONDS - 1
    os.utime(left, (old, old))
    quarantine = Quarantine(folder)
    assert quarantine.put(_exchange("a refused record"), "the store refused it")
    files = list(folder.iterdir())
    assert len(files) == 1 and not files[0].name.startswith(".")
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    [record] = list(quarantine.records())
    assert record.reason == "the store refused it"
    assert record.exchange.input[0].content == "a refused record"
