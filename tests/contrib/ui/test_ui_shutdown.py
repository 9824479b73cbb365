"""``memtap ui`` in the foreground stops cleanly on SIGTERM (systemd, docker, Kubernetes)
and on Ctrl-C: it exits 0 with its Memory closed, so the store file is free for the next
process. It died by SIGTERM before (rc -15), as uvicorn re-raises the signal once it has
shut down, with the Memory never closed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import memtap
from memtap.testing.timing import wait_listening


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_memtap_ui_stops_cleanly_on_a_signal(store_url: str, tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
    ui = subprocess.Popen(
        [sys.executable, "-m", "memtap.cli", "ui", "--store", store_url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, ui)
        ui.send_signal(sig)
        assert ui.wait(timeout=30) == 0, ui.stderr.read().decode() if ui.stderr else ""
    finally:
        if ui.poll() is None:
            ui.kill()
            ui.wait()
    mem = memtap.Memory(store_url, spool=False, embedder=False)  # the file is free again
    try:
        assert mem.facts(entity_id="alice")
    finally:
        mem.close()
