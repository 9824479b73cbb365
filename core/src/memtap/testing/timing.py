"""Time in tests: one slack factor for every time bound, and waiting by deadline polling
instead of sleeping.

A test that bounds how long something may take (``assert elapsed < slack(1.0)``) or how
long to wait for another thread (``wait_for(lambda: store.count() == 3)``) states the time
it expects on an idle machine; :func:`slack` scales it by ``$MEMTAP_TEST_SLACK`` (default
:data:`DEFAULT_SLACK`), so a loaded CI host raises one number instead of every test's.
A bound guards a failure that takes longer than the bound even scaled: keep what it
guards against (a stuck hook, a deadline) scaled with it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_SLACK", "SLACK_ENV", "eventually", "slack", "slack_factor", "wait_for", "wait_listening"]

#: The environment variable that scales every time bound of memtap's tests.
SLACK_ENV = "MEMTAP_TEST_SLACK"
#: The factor without :data:`SLACK_ENV`: room for a shared 2-core host under load.
DEFAULT_SLACK = 3.0


def slack_factor() -> float:
    """The factor time bounds are scaled by: ``$MEMTAP_TEST_SLACK``, else :data:`DEFAULT_SLACK`."""
    raw = os.environ.get(SLACK_ENV, "").strip()
    if not raw:
        return DEFAULT_SLACK
    try:
        factor = float(raw)
    except ValueError:
        raise ValueError(f"{SLACK_ENV}={raw!r} is not a number") from None
    if factor <= 0:
        raise ValueError(f"{SLACK_ENV}={raw!r}: the factor must be above 0")
    return factor


def slack(seconds: float) -> float:
    """``seconds`` (what a test expects on an idle machine) scaled by :func:`slack_factor`."""
    return seconds * slack_factor()


def eventually(check: Callable[[], bool], timeout: float = 5.0, *, interval: float = 0.005) -> bool:
    """Whether ``check()`` holds within ``slack(timeout)`` seconds, asked every ``interval``:
    for what another thread or process does (a background write, a change feed's report)."""
    deadline = time.monotonic() + slack(timeout)
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def wait_for(check: Callable[[], bool], timeout: float = 5.0, *, what: str = "the condition") -> None:
    """Wait until ``check()`` holds, or fail the test after ``slack(timeout)`` seconds."""
    if not eventually(check, timeout):
        raise AssertionError(f"{what} did not hold within {slack(timeout):.1f} s")


def wait_listening(
    port: int,
    process: subprocess.Popen[Any] | None = None,
    timeout: float = 30.0,
    *,
    host: str = "127.0.0.1",
) -> None:
    """Until a server accepts connections on ``host:port``: raise ``AssertionError`` when
    ``process`` (the server's, if given) ends first, saying what it wrote to a piped
    stderr, or when ``timeout`` seconds (scaled by :func:`slack`) pass."""
    deadline = time.monotonic() + slack(timeout)
    while True:
        if process is not None and process.poll() is not None:
            said = process.stderr.read() if process.stderr is not None else ""
            said = said.decode(errors="replace") if isinstance(said, bytes) else said
            raise AssertionError(f"the server exited ({process.returncode}) before listening: {said}")
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"nothing listened on {host}:{port} within {slack(timeout):.0f} s"
                ) from None
            time.sleep(0.05)
