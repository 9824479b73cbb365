"""onnxruntime, imported with its telemetry off.

From 1.29 onnxruntime starts a telemetry thread when it is imported (on Linux too), which
waits on a condition variable. A child forked after that (a prefork server's worker, a
``multiprocessing`` fork that exits through ``sys.exit``) inherits the condition's count
of waiters but not the waiter, and hangs for ever at exit in the static destructor that
destroys it (``pthread_cond_destroy``): every time, with no model even loaded
(``tests/plugins/minilm/test_fork_after_the_model.py``). ``ORT_DISABLE_TELEMETRY=1``
before the import keeps the thread from starting, and memtap sends nothing anywhere.
There is no call for it once imported (``disable_telemetry_events()`` leaves the thread).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("memtap.minilm")

#: The variable onnxruntime reads at import; memtap sets it unless it is already set.
TELEMETRY_SWITCH = "ORT_DISABLE_TELEMETRY"


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module, imported with :data:`TELEMETRY_SWITCH` set to ``1``
    unless the environment sets it already (the user's choice stands)."""
    if "onnxruntime" not in sys.modules:
        os.environ.setdefault(TELEMETRY_SWITCH, "1")
    elif os.environ.get(TELEMETRY_SWITCH) != "1":
        log.debug("onnxruntime was imported before memtap could turn its telemetry off")
    import onnxruntime  # type: ignore[import-untyped]

    return onnxruntime
