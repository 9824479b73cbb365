"""A file published whole: readers see the old file, the new one or none, never a part.

Files that processes running at once may write, and that a process killed mid-write must
not leave half-written (a derived model, a quick query table, a quarantined record), are
written to a work file of the same directory and renamed over their name when whole
(:func:`publish_atomically`). What a killed writer left is removed by a later one
(:func:`remove_stale_work`); a reader lists the directory without them (their names start
with a dot and end in ``.work``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

#: A work file older than this was left by a process that died writing it (a write takes
#: well under a second); :func:`remove_stale_work` removes it.
STALE_WORK_SECONDS = 600.0
_WORK_SUFFIX = ".work"


def publish_atomically(target: Path, write: Callable[[BinaryIO], object], *, mode: int | None = None) -> None:
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
