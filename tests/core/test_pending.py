"""memtap.workers.pending.PendingWork: the count behind every flush()."""

from __future__ import annotations

import threading
import time

from memtap.testing.timing import slack
from memtap.workers.pending import PendingWork


def test_wait_returns_at_once_when_nothing_is_pending():
    assert PendingWork().wait(0) is True


def test_wait_times_out_while_work_is_pending_and_returns_when_it_is_done():
    pending = PendingWork()
    pending.add(3)
    assert pending.wait(0.05) is False
    threading.Timer(0.05, pending.done, args=(3,)).start()
    started = time.monotonic()
    assert pending.wait(5) is True
    assert time.monotonic() - started < slack(2)
    assert pending.count == 0
