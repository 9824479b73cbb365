"""A process that exits while memtap embeds in the background ends normally.

At interpreter exit CPython ends a daemon thread that comes back from a native call which
released the GIL with ``pthread_exit``; inside onnxruntime's ``Run`` that unwinding reaches
``std::terminate`` and the process aborts (status 134, "terminate called without an active
exception"), however well the application itself ended. Before the fix a process that
closed its Memory with a short timeout, or whose backlog outlasted ``close()``'s wait,
died that way in about one exit in ten (issue 37's soak printed it once).

Each case is a child process that leaves memtap mid-work at a different instant and exits;
the test asserts on its exit status and on everything it wrote to stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from memtap.testing.timing import slack

#: A child: a backlog of long facts (the model spends tens of ms on each batch), ``close``
#: with a short timeout once the worker has embedded ``started`` facts (so a batch is in
#: flight), then the interpreter exits; with ``helpers``, quiet long enough first for the
#: worker to split its batches over the helper threads too.
CHILD = textwrap.dedent(
    """
    import sys, time
    import memtap, memtap_minilm
    from memtap.storage.store import InMemoryStore

    facts, started = int(sys.argv[1]), int(sys.argv[2])
    close_after, helpers = float(sys.argv[3]), sys.argv[4] == "1"
    mem = memtap.Memory(InMemoryStore(), entry_points=False, plugins=[memtap_minilm])
    words = " ".join(f"word{i} about hiking the hills and the colour teal" for i in range(25))
    for i in range(facts):
        mem.remember(f"fact {i}: {words}", entity_id="exiting")
    stats = mem.longterm.engine.worker.stats
    deadline = time.monotonic() + 60
    while stats.facts_embedded < started and time.monotonic() < deadline:
        time.sleep(0.005 if not helpers else 0.05)
    time.sleep(close_after)
    mem.close(0.01)
    print("closed", stats.facts_embedded, flush=True)
    """
)


def run_child(
    facts: int, started: int, close_after: float, helpers: bool
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-X",
            "faulthandler",
            "-c",
            CHILD,
            str(facts),
            str(started),
            str(close_after),
            str(int(helpers)),
        ],
        capture_output=True,
        text=True,
        timeout=slack(120),
    )


@pytest.mark.parametrize(
    "started,close_after,helpers",
    [
        (1, 0.0, False),  # the first batch
        (16, 0.013, False),
        (32, 0.029, False),
        (48, 0.041, False),
        (16, 0.6, True),  # quiet: the batch is split over the helper threads
        (32, 0.9, True),
    ],
)
def test_exit_while_the_model_runs_ends_the_process_normally(started, close_after, helpers):
    done = run_child(400, started, close_after, helpers)
    assert done.returncode == 0, f"exit status {done.returncode}; stderr:\n{done.stderr[-3000:]}"
    assert "closed" in done.stdout
    embedded = int(done.stdout.split()[-1])
    assert embedded < 400, "the backlog was done before close: this case tested nothing"
    # Nothing on stderr: no abort, and no warning about a store or embedder that failed
    # because memtap was closing.
    assert done.stderr == "", done.stderr[-3000:]
