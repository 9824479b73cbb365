"""Appending a small record to a regular file without letting another thread in.

``os.write`` releases the GIL around ``write(2)``, as every blocking call in CPython does.
For a spool record that is a copy of a few kilobytes into the page cache (a microsecond or
two), and releasing costs far more than the copy: a thread that was waiting for the GIL
(memtap's capture writer, the app's own threads) takes it, and the call that is about to
return to the app waits until that thread lets go again (10-30 µs measured on a streamed
call's record). :func:`write_holding_gil` calls libc's ``write`` through
:class:`ctypes.PyDLL`, which keeps the GIL for the call. No library offers this (the
standard library's writes all release the GIL), hence these few lines.

Only for regular files and small buffers: a write that may block (a pipe, a socket, a
large buffer under memory pressure) must release the GIL, and goes through ``os.write``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

#: Buffers up to this size are written holding the GIL (a page-cache copy of this size
#: takes tens of microseconds at most); larger ones release it (``os.write``).
HOLD_GIL_MAX_BYTES = 256 * 1024

_RawWrite = Callable[[int, bytes, int], int]


def _libc_write() -> tuple[_RawWrite, Callable[[], int]] | None:
    """libc's ``write`` called with the GIL held, and ctypes' saved ``errno``; ``None``
    where ctypes or libc cannot be had (the caller then uses ``os.write``)."""
    try:
        import ctypes

        libc = ctypes.PyDLL(None, use_errno=True)
        write = libc.write
        write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
        write.restype = ctypes.c_ssize_t
    except (ImportError, OSError, AttributeError):  # pragma: no cover - no ctypes or no libc
        return None
    return write, ctypes.get_errno


_LIBC = _libc_write()


def write_holding_gil(fd: int, data: bytes) -> int:
    """``os.write(fd, data)`` without releasing the GIL: the number of bytes written, or
    ``OSError`` as ``os.write`` raises it (a write a signal interrupted is tried again).
    Falls back to ``os.write`` where libc cannot be called (or ``data`` is not ``bytes``)."""
    if _LIBC is None or type(data) is not bytes:
        return os.write(fd, data)
    write, get_errno = _LIBC
    while True:
        written = write(fd, data, len(data))
        if written >= 0:
            return written
        code = get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def append_record(fd: int, data: bytes) -> int:
    """Write ``data`` to the regular file ``fd``: holding the GIL when it is small
    (:data:`HOLD_GIL_MAX_BYTES`), else with ``os.write``."""
    if len(data) <= HOLD_GIL_MAX_BYTES:
        return write_holding_gil(fd, data)
    return os.write(fd, data)
