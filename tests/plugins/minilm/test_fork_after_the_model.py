"""A process that loaded memtap's model forks children that exit normally.

From 1.29 onnxruntime starts a telemetry thread at import, waiting on a condition
variable; a forked child inherits the condition's count of waiters, not the waiter, and
hangs for ever at exit in ``pthread_cond_destroy`` (a static destructor). Before the fix
every child hung, with the model idle or running (a prefork server's worker that exits,
``multiprocessing`` children that end through ``sys.exit``); a fork test of the reliability
suite timed out on it in CI. memtap now imports onnxruntime with its telemetry off
(:mod:`memtap_minilm.runtime`).

Each case is a fresh interpreter (no ``ORT_DISABLE_TELEMETRY`` in its environment) that
loads the model through memtap, forks children while the model is idle or embedding in
another thread, and reports which children did not exit within the deadline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from memtap.testing.timing import slack

CHILD = textwrap.dedent(
    """
    import json, os, sys, threading, time, warnings
    import memtap, memtap_minilm
    from memtap.storage.store import InMemoryStore

    warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads
    forks, running, deadline = int(sys.argv[1]), sys.argv[2] == "1", float(sys.argv[3])
    mem = memtap.Memory(InMemoryStore(), entry_points=False, plugins=[memtap_minilm])
    embedder = mem.embedder
    embedder.load()
    embedder.embed(["warm"])
    stop = threading.Event()

    def embed_on() -> None:
        while not stop.is_set():
            embedder.embed([f"text {i} about the hills and the colour teal" for i in range(8)])

    spinner = threading.Thread(target=embed_on)
    if running:
        spinner.start()
    hung, statuses = 0, []
    for _ in range(forks):
        time.sleep(0.02)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a normal exit: finalization, then the C++ static destructors
        give_up = time.monotonic() + deadline
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses.append(os.waitstatus_to_exitcode(status))
                break
            if time.monotonic() > give_up:
                hung += 1
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                break
            time.sleep(0.01)
    stop.set()
    if running:
        spinner.join()
    mem.close()
    print(json.dumps({"hung": hung, "statuses": statuses}))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
@pytest.mark.parametrize("running", [False, True], ids=["model-idle", "model-embedding"])
def test_children_forked_after_the_model_loaded_exit(running: bool) -> None:
    forks = 4
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(forks), "1" if running else "0", str(slack(10.0))],
        capture_output=True,
        text=True,
        env=env,
        timeout=slack(120.0) + forks * slack(10.0),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"hung": 0, "statuses": [0] * forks}, done.stderr[-2000:]
