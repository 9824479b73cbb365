"""Interpreter exit waits for memtap's background native work (memtap.workers.native).

A daemon thread ended at exit while inside a C++ call aborts the process (the real case,
onnxruntime's ``Run``, is in tests/plugins/minilm/test_exit_while_embedding.py). Here the
contract itself, in child processes: exit waits for a unit in flight, starts no new one,
and waits a bounded time; and the embedding worker runs each batch as such a unit, so a
batch in flight when the application closes and exits ends first and stores nothing into
the closed store.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from memtap.testing.timing import slack


def run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=slack(60),
    )


def test_exit_waits_for_a_unit_in_flight():
    done = run(
        """
        import threading, time
        from memtap.workers.native import native_work
        started = threading.Event()
        def work():
            with native_work():
                started.set()
                time.sleep(0.5)
                print("unit ended", flush=True)
        threading.Thread(target=work, daemon=True).start()
        started.wait()
        print("main ends", flush=True)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["main ends", "unit ended"]


def test_no_background_unit_starts_once_exit_began():
    done = run(
        """
        import threading
        from memtap.workers.native import InterpreterExiting, native_work, settle, exiting

        def background():
            try:
                with native_work():
                    print("started")
            except InterpreterExiting as exc:
                print("refused:", exc)

        def in_a_daemon_thread():
            thread = threading.Thread(target=background, daemon=True)
            thread.start()
            thread.join()

        assert not exiting()
        in_a_daemon_thread()
        assert settle(0)
        assert exiting()
        in_a_daemon_thread()
        with native_work():  # the exiting thread itself (or another it waits for) goes on
            print("main goes on")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [
        "started",
        "refused: the interpreter is exiting: background work stops",
        "main goes on",
    ]


def test_the_wait_at_exit_is_bounded():
    started = time.monotonic()
    done = run(
        """
        import threading, time
        from memtap.workers import native
        native.EXIT_GRACE = 0.3
        begun = threading.Event()
        def stuck():
            with native.native_work():
                begun.set()
                time.sleep(60)
        threading.Thread(target=stuck, daemon=True).start()
        begun.wait()
        """
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < slack(20)


#: A child whose embedder takes 0.2 s a batch and logs each batch's start and end; it
#: closes its Memory with a short timeout while a batch runs, then exits.
SLOW_EMBEDDER_CHILD = """
    import sys, time
    import memtap
    from memtap.storage.store import InMemoryStore

    log = open(sys.argv[1], "a", buffering=1)

    class SlowEmbedder:
        name = "slow-v1"
        def embed(self, texts):
            log.write("start\\n")
            time.sleep(0.2)
            log.write("end\\n")
            return [[1.0, float(len(t) % 7), 0.5] for t in texts]

    store = InMemoryStore()
    mem = memtap.Memory(store, entry_points=False, embedder=SlowEmbedder())
    for i in range(60):
        mem.remember(f"fact {i}: I like walking by the river", entity_id="e")
    stats = mem.longterm.engine.worker.stats
    deadline = time.monotonic() + 30
    while open(sys.argv[1]).read().count("start") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    mem.close(0.01)
    print("closed", flush=True)
"""


def test_a_batch_in_flight_at_exit_ends_first_and_stores_nothing_after_close(tmp_path):
    log = tmp_path / "batches.log"
    done = run(SLOW_EMBEDDER_CHILD, str(log))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "closed\n"
    lines = log.read_text().split()
    assert lines.count("start") >= 2
    assert lines.count("start") == lines.count("end"), lines  # no batch cut off by the exit
    assert lines.count("start") < 60 / 16 + 2, "the backlog was embedded before exit: close waited for it all"
    assert done.stderr == "", done.stderr  # no "could not store", no "embedder failed"
