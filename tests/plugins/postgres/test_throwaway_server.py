"""`python -m memtap_postgres.testing.server`: prints a URL, serves PostgreSQL with pgvector
until SIGTERM, then stops the server and deletes its data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg


def test_serves_until_sigterm_then_deletes_its_data() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "memtap_postgres.testing.server"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("postgresql://postgres@127.0.0.1:") and url.endswith("/test"), url
        with psycopg.connect(url, connect_timeout=5) as conn:
            data = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
            pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
            conn.execute("CREATE EXTENSION vector")
            assert conn.execute("SELECT '[3,4]'::vector <=> '[6,8]'::vector").fetchone() == (0.0,)
            if os.geteuid() == 0:  # PostgreSQL refuses root: it runs as an unprivileged account
                assert data.stat().st_uid != 0
        assert data.is_dir()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
        assert not data.exists() and not data.parent.exists()
        assert not Path(f"/proc/{pid}").exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_sigint_stops_it_too() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "memtap_postgres.testing.server"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        with psycopg.connect(url, connect_timeout=5) as conn:
            data = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0
        assert not data.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_starts_with_its_temporary_folder_under_a_private_folder(tmp_path: Path) -> None:
    """As nox runs it: TMPDIR is `.nox/<session>/tmp` inside the clone, and the clone may sit
    under a 0700 folder (`mktemp -d`, root's home) that the server's account cannot enter."""
    private = tmp_path / "private"
    (private / "clone" / "tmp").mkdir(parents=True)
    private.chmod(0o700)
    env = {**os.environ, "TMPDIR": str(private / "clone" / "tmp")}
    server = subprocess.Popen(
        [sys.executable, "-m", "memtap_postgres.testing.server"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("postgresql://"), server.stderr.read() if server.stderr else url
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
