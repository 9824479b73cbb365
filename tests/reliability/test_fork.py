"""A process forked after its Memory was made (a pre-forking server that loads the app
first) passes its LLM calls through without memory and leaves the parent's store alone.

Before, the fork used the parent's store connection: on PostgreSQL its calls were never
stored (``flush()`` gave up), its recall failed ("the last operation didn't produce
records"), and a request went out corrupted and was sent again without memory; its exit
closed the store the parent still used. Now the fork's calls go to the provider unchanged,
one warning says why and what to do, ``remember()`` raises :class:`memtap.ForkedMemoryError`,
and the parent goes on as before.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from reliability_support import BACKENDS

from memtap.testing.server import ScriptedModelServer

CHILD = Path(__file__).with_name("child_fork.py")


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_a_fork_passes_calls_through_and_leaves_the_parents_store_alone(
    store_url: str, server: ScriptedModelServer
) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", str(CHILD), store_url, server.openai_base_url, "pf"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert "forks [0, 0]" in out, proc.stdout + proc.stderr[-3000:]
    assert "fork 0 done" in out and "fork 1 done" in out
    refusals = [line for line in out if " refused: remember() refused" in line]
    assert len(refusals) == 2 and all("post_fork" in line for line in refusals), out
    # The parent's calls before and after the forks are stored; the forks' are not.
    assert "stored [2, 0, 0]" in out, out
    # What the forks sent is the application's request, unchanged: no memory injected.
    sent = [r.json for r in server.requests if "fork " in str(r.json)]
    assert len(sent) == 6
    assert all(len(body["messages"]) == 1 and body["messages"][0]["role"] == "user" for body in sent)
    # One warning per fork, saying what to do, and nothing else.
    warnings = proc.stderr.strip().splitlines()
    assert len(warnings) == 2, proc.stderr[-3000:]
    assert all("is a fork of it" in w and "post_fork" in w for w in warnings), warnings
