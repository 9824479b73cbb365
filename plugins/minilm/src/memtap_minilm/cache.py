"""The cache directory the embedder keeps derived files in, and how a file gets there.

Two things are derived from the installed model once per machine and kept here: the
model onnxruntime runs (:mod:`memtap_minilm.int8`) and the quick query table
(:mod:`memtap_minilm.quick`). Both are written by processes that may run at once and may
be killed mid-write, so both go through :func:`publish_atomically` (readers see a whole
file or none) and :func:`remove_stale_work` (what a killed writer left is removed by a
later one), and both are named by :func:`model_digest` of the shipped model, hashed once
per process.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

#: The environment variable that names the cache directory.
CACHE_ENV = "MEMTAP_CACHE"
#: A work file older than this was left by a process that died writing it (a write takes
#: well under a second); :func:`remove_stale_work` removes it.
STALE_WORK_SECONDS = 600.0
_WORK_SUFFIX = ".work"

_digests: dict[tuple[Path, int, int], str] = {}
_digests_lock = threading.Lock()


def cache_dir() -> Path:
    """Where derived model files are kept: ``$MEMTAP_CACHE``, else
    ``$XDG_CACHE_HOME/memtap``, else ``~/.cache/memtap``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "memtap"


def model_digest(path: Path) -> str:
    """A short digest of the file at ``path`` (a new model never reuses what was derived
    from an old one). Hashed once per process for a file of the same size and time
    (the model is ~23 MB: ~40 ms)."""
    stat = path.stat()
    key = (path, stat.st_size, stat.st_mtime_ns)
    with _digests_lock:
        known = _digests.get(key)
        if known is None:
            h = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            known = _digests[key] = h.hexdigest()[:16]
        return known


def publish_atomically(target: Path, write: Callable[[BinaryIO], None], *, mode: int | None = None) -> None:
    """Make ``target`` the bytes ``write`` writes to the file it is given, atomically:
    they go to a work file of ``target``'s directory, renamed over ``target`` when whole,
    so a reader sees the old file, the new one or none, never a part. ``mode`` sets the
    file's permissions (the work file is its owner's alone). The work file is removed when
    ``write`` fails; one left by a killed process is removed by :func:`remove_stale_work`."""
    handle, work = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=_WORK_SUFFIX)
    os.close(handle)  # opened again by name: writers such as onnx.save read ``f.name``
    try:
        with open(work, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            write(f)
        os.replace(work, target)
    except BaseException:
        Path(work).unlink(missing_ok=True)
        raise


def remove_stale_work(directory: Path) -> None:
    """Remove the work files of :func:`publish_atomically` in ``directory`` that writers
    which died left (older than :data:`STALE_WORK_SECONDS`); one being written is younger."""
    cutoff = time.time() - STALE_WORK_SECONDS
    for work in directory.glob(f".*{_WORK_SUFFIX}"):
        try:
            if work.stat().st_mtime < cutoff:
                work.unlink()
        except OSError:  # removed meanwhile by another process
            continue
