"""The spool's record write: small records keep the GIL through ``write(2)``; real file
faults (a file-size limit: a short write, then EFBIG) reach the spool as ``os.write``'s do."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from memtap.capture import filewrite


def test_write_holding_gil_writes_and_returns_the_count(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        assert filewrite.write_holding_gil(fd, b"one\n") == 4
        assert filewrite.append_record(fd, b"two\n") == 4
        big = b"x" * (filewrite.HOLD_GIL_MAX_BYTES + 1) + b"\n"
        assert filewrite.append_record(fd, big) == len(big)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"one\ntwo\n" + big


def test_errors_are_raised_as_os_write_raises_them(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as ours:
            filewrite.write_holding_gil(fd, b"x")
        with pytest.raises(OSError) as stdlib:
            os.write(fd, b"x")
    finally:
        os.close(fd)
    assert ours.value.errno == stdlib.value.errno == errno.EBADF
    assert ours.value.strerror == stdlib.value.strerror


def _other_thread_progress(write: object, fd: int, data: bytes) -> int:
    """How far a spinning Python thread gets while ``write(fd, data)`` runs."""
    counter = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=spin)
    # A short switch interval: the thread's share around the call (the GIL changes hands
    # between reading `before` and calling) is then a millisecond, not five.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    thread.start()
    try:
        while counter[0] < 1000:  # the thread is running and wants the GIL back
            pass
        before = counter[0]
        write(fd, data)  # type: ignore[operator]
        return counter[0] - before
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)


def test_another_thread_does_not_run_during_the_write(tmp_path: Path) -> None:
    # A long write (a large buffer into the page cache) so the difference shows: with the
    # GIL held the spinning thread cannot run at all; with os.write it runs the whole time.
    # On a loaded host the spinning thread gets less of a core during os.write, and may
    # still run for a switch interval around the held write: so the least it got while the
    # GIL was held is compared with the most it got while it was released, over five
    # rounds. A write that released the GIL would let it run as far in every round.
    data = b"x" * (128 * 1024 * 1024)
    held, released = [], []
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(5):
            os.lseek(fd, 0, os.SEEK_SET)
            held.append(_other_thread_progress(filewrite.write_holding_gil, fd, data))
            os.lseek(fd, 0, os.SEEK_SET)
            released.append(_other_thread_progress(os.write, fd, data))
    finally:
        os.close(fd)
    assert max(released) > 1000
    assert min(held) < max(released) / 10, (held, released)


_FSIZE_SCRIPT = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    from memtap.capture import spool

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not death
    directory, size = Path(sys.argv[1]), int(sys.argv[2])
    sp = spool.Spool(directory)
    first = b'{"v":1,"id":"a"}\\n'
    assert sp.append(first) is not None
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    torn = b'{"v":1,"id":"b","x":"' + b"y" * size + b'"}\\n'
    # Room for half of it: write(2) writes what fits (a short write), cut off again.
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(first) + len(torn) // 2, hard))
    assert sp.append(torn) is None
    # No room at all: write(2) fails with EFBIG.
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(first), hard))
    assert sp.append(torn) is None
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert sp.append(b'{"v":1,"id":"c"}\\n') is not None
    print(sp.stats.failed)
    sp.close()
    """
)


@pytest.mark.parametrize("size", [100, filewrite.HOLD_GIL_MAX_BYTES + 100], ids=["held", "os-write"])
def test_a_real_short_write_and_efbig_leave_the_spool_readable(tmp_path: Path, size: int) -> None:
    """The record write as the disk makes it fail (a file-size limit), not a patched seam:
    a short write is cut off again and counted, later records land whole."""
    result = subprocess.run(
        [sys.executable, "-c", _FSIZE_SCRIPT, str(tmp_path / "spool"), str(size)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2"]
    (path,) = (tmp_path / "spool").glob("*.jsonl*")
    assert path.read_bytes() == b'{"v":1,"id":"a"}\n{"v":1,"id":"c"}\n'
