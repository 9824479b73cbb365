"""Files only their owner can read: memtap's home, its spool and store files hold whole
conversations, so directories memtap creates are 0700 and its files 0600 — set explicitly
after creation, because the process's umask (often 022) would otherwise widen them."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and any missing parents, each created one 0700; returns the path.
    Directories that already exist keep their mode (they may be shared ones, such as
    ``~/.local/share``). Raises ``OSError`` when it cannot be created."""
    path = Path(path)
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by another process meanwhile
            directory.mkdir(mode=DIR_MODE)
            os.chmod(directory, DIR_MODE)
    if not path.is_dir():
        path.mkdir()  # raises the clear error (a file in the way)
    return path


def make_private(path: str | os.PathLike[str]) -> bool:
    """Take every group and other permission off an existing file or directory; ``False``
    when it does not exist or cannot be changed (not our own)."""
    try:
        current = os.stat(path).st_mode
        if current & 0o077:
            os.chmod(path, current & 0o700)
        return True
    except OSError:
        return False


def create_private_file(path: str | os.PathLike[str]) -> bool:
    """Create an empty file with mode 0600 unless it exists; ``False`` if it could not."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return True
    except OSError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True
