"""The cache's files (``memtap_minilm.cache``): published whole, with the permissions
asked for, and what a killed writer left removed by a later one."""

from __future__ import annotations

import os
import time

import pytest

from memtap_minilm import cache


def test_a_file_is_published_whole_with_its_mode_and_no_work_file_left(tmp_path):
    target = tmp_path / "model.onnx"
    cache.publish_atomically(target, lambda f: f.write(b"weights"), mode=0o644)
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
        cache.publish_atomically(target, failing)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.npy"]


def test_only_work_files_older_than_a_live_write_are_removed(tmp_path):
    dead, live, other = tmp_path / ".a.npy.x1.work", tmp_path / ".a.npy.x2.work", tmp_path / "kept.work"
    for path in (dead, live, other):
        path.write_bytes(b"")
    old = time.time() - cache.STALE_WORK_SECONDS - 1
    for path in (dead, other):
        os.utime(path, (old, old))
    cache.remove_stale_work(tmp_path)
    assert not dead.exists() and live.exists() and other.exists()


def test_a_file_is_hashed_once_until_it_changes(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"one")
    first = cache.model_digest(model)
    assert cache.model_digest(model) == first
    model.write_bytes(b"two, longer")
    assert cache.model_digest(model) != first
