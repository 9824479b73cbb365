"""``kill -9`` a second after a turn loses no episode (issue 34): a turn's episodes are made
as soon as it is stored, and a turn stored but not yet memorized when its process dies is
replayed from the spool, and memorized, by the next process on the same store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from reliability_support import BACKENDS

import memtap
from memtap.testing.server import ScriptedModelServer

CHILD = Path(__file__).with_name("child_turn.py")
TURN = "My favourite colour is teal."
QUESTION = "What is my favourite colour?"


def start(
    store_url: str, server: ScriptedModelServer, tag: str, mode: str, spool: Path
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        # faulthandler: a child that hangs dumps its threads when the watchdog aborts it.
        [
            sys.executable,
            "-X",
            "faulthandler",
            str(CHILD),
            store_url,
            server.openai_base_url,
            tag,
            mode,
            str(spool),
        ],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def abort(proc: subprocess.Popen[str]) -> None:
    """Stop a hung child so that it says where it hung: SIGABRT makes its faulthandler
    write every thread's stack to stderr; SIGKILL if it is still running 5 s later."""
    proc.send_signal(signal.SIGABRT)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_for(proc: subprocess.Popen[str], line: str, timeout: float = 120.0) -> None:
    """Read the child's output until it prints ``line`` (aborted after ``timeout``, its
    threads' stacks in the failure)."""
    watchdog = threading.Timer(timeout, abort, [proc])
    watchdog.start()
    try:
        assert proc.stdout is not None
        for got in proc.stdout:
            if got.strip() == line:
                return
    finally:
        watchdog.cancel()
    _, err = proc.communicate(timeout=30)
    pytest.fail(f"the child never printed {line!r} (exit {proc.returncode}):\n{err}")


def kill_9(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL


def recalled(mem: memtap.Memory, tag: str) -> list[str]:
    return [h.text for h in mem.recall(QUESTION, entity_id=f"e-{tag}")]


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_kill_9_a_second_after_a_turn_loses_no_episode(
    store_url: str, server: ScriptedModelServer, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    proc = start(store_url, server, "teal", "turn", spool)
    wait_for(proc, "said")
    time.sleep(1.0)  # the scenario itself: the process is killed a second after the turn
    kill_9(proc)
    # The dead process had stored the turn's episode: found without replaying its spool...
    with memtap.Memory(store_url, spool=False, embedder=False) as mem:
        assert TURN in recalled(mem, "teal")
    # ... and replaying it stores nothing twice.
    with memtap.Memory(store_url, embedder=False, spool=spool) as mem:
        assert mem.flush(30)
        texts = [f.text for f in mem.facts(entity_id="e-teal")]
        assert texts.count(TURN) == 1, texts
        assert TURN in recalled(mem, "teal")


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_a_turn_stored_but_not_memorized_when_killed_is_memorized_at_the_next_start(
    store_url: str, server: ScriptedModelServer, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    proc = start(store_url, server, "stuck", "stuck", spool)
    # The first turn is stored and memorizing it never ends; a second turn sealed the
    # spool segment holding it (a segment whose calls are all done is deleted at once).
    wait_for(proc, "said")
    kill_9(proc)
    with memtap.Memory(store_url, spool=False, embedder=False) as mem:
        stored = [m.content for ex in mem.store.exchanges(entity_id="e-stuck") for m in ex.input]
        assert stored[-1] == TURN or stored[-2] == TURN  # the second turn may not be stored yet
        assert mem.facts(entity_id="e-stuck") == []  # died before its episodes were made
    with memtap.Memory(store_url, embedder=False, spool=spool) as mem:  # replays what it left
        assert mem.flush(30)
        assert TURN in recalled(mem, "stuck")
        assert "I live in Lyon." in [f.text for f in mem.facts(entity_id="e-stuck")]
        assert len(list(mem.store.exchanges(entity_id="e-stuck"))) == 2
    assert sorted(spool.glob("*.jsonl")) == []
