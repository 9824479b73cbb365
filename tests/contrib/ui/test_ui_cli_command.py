"""memtap-ui adds `memtap ui` through the `memtap_cli_commands` hook (entry point ``ui``);
a Memory does not import the web application; `memtap ui` serves a store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
from click.testing import CliRunner

import memtap_ui.plugin
from memtap.cli.main import MemtapGroup, main
from memtap.memory import plugin_manager
from memtap.testing.imports import imported_after, imported_by_the_command_line
from memtap_ui.cli import ui


def test_the_plugin_adds_the_ui_command():
    cli = MemtapGroup(name="memtap")
    cli.add_plugin_commands(plugin_manager(entry_points=False, extra=[memtap_ui.plugin]))
    assert cli.commands["ui"] is ui


def test_memtap_ui_is_the_plugins_command():
    result = CliRunner().invoke(main, ["ui", "--help"], prog_name="memtap")
    assert result.exit_code == 0, result.output
    assert "Usage: memtap ui [OPTIONS]" in result.output
    assert "--store" in result.output and "--token" in result.output and "--port" in result.output
    listed = {p["name"]: p for p in json.loads(CliRunner().invoke(main, ["plugins", "--json"]).output)}
    assert listed["ui"]["distribution"] == "memtap-ui"
    assert listed["ui"]["hooks"] == ["memtap_cli_commands"]


def test_a_memory_does_not_import_the_web_application():
    code = (
        "import sys, memtap\n"
        "memtap.Memory('memory://', spool=False, embedder=False).close()\n"
        "assert 'memtap_ui.plugin' in sys.modules\n"
    )
    assert imported_after(code, ["starlette", "jinja2", "uvicorn", "memtap_ui.app", "memtap_ui.cli"]) == []


def test_the_command_line_does_not_import_the_web_application_until_ui_runs():
    """Listing the commands (``memtap --help``, and any command: click resolves it among
    the plugins' ones) imports the plugin's command, not the server behind it (~0.16 s)."""
    heavy = ["starlette", "jinja2", "uvicorn", "memtap_ui.app", "memtap_ui.server"]
    assert imported_by_the_command_line(["memtap_ui.cli", *heavy]) == ["memtap_ui.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_memtap_ui_serves_a_store_until_stopped(store_url, tmp_path):
    port = free_port()
    env = {**os.environ, "MEMTAP_HOME": str(tmp_path / "home"), "MEMTAP_EMBEDDER": "none"}
    env.pop("MEMTAP_STORE", None)
    command = [
        sys.executable,
        "-m",
        "memtap.cli",
        "ui",
        "--store",
        store_url,
        "--port",
        str(port),
        "--token",
        "t0k",
    ]
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/?token=t0k", follow_redirects=True)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "memtap ui did not start"
                time.sleep(0.2)
        assert page.status_code == 200 and 'href="/entities/alice"' in page.text
        assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 401
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert f"memtap UI on http://127.0.0.1:{port}/?token=t0k" in output


def test_memtap_ui_on_a_missing_store_says_so_and_creates_nothing(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "MEMTAP_HOME": str(home), "MEMTAP_EMBEDDER": "none"}
    env.pop("MEMTAP_STORE", None)
    done = subprocess.run(
        [sys.executable, "-m", "memtap.cli", "ui", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "no memtap store at" in done.stderr and "memtap demo" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (home / "memtap.duckdb").exists()
