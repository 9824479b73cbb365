"""memtap-proxy adds `memtap proxy` through the `memtap_cli_commands` hook (entry point
``proxy``); core's command line does not import it."""

from __future__ import annotations

import json

from click.testing import CliRunner

import memtap
import memtap_proxy.plugin
from memtap.cli.main import MemtapGroup, main
from memtap.memory import plugin_manager
from memtap.testing.imports import imported_after, imported_by_the_command_line
from memtap_proxy.cli import proxy


def test_the_plugin_adds_the_proxy_command():
    cli = MemtapGroup(name="memtap")
    cli.add_plugin_commands(plugin_manager(entry_points=False, extra=[memtap_proxy.plugin]))
    assert cli.commands["proxy"] is proxy


def test_memtap_proxy_is_the_plugins_command():
    result = CliRunner().invoke(main, ["proxy", "--help"], prog_name="memtap")
    assert result.exit_code == 0, result.output
    assert "Usage: memtap proxy [OPTIONS]" in result.output
    assert "--openai-upstream" in result.output and "--tokens" in result.output
    assert main.commands["proxy"] is proxy


def test_memtap_plugins_lists_the_proxy_plugin_and_its_hook():
    listed = {p["name"]: p for p in json.loads(CliRunner().invoke(main, ["plugins", "--json"]).output)}
    assert listed["proxy"]["distribution"] == "memtap-proxy"
    assert listed["proxy"]["hooks"] == ["memtap_cli_commands"]


def test_a_memory_does_not_import_the_proxy_server():
    """Every Memory loads the plugin's module: the server and its command stay unimported."""
    code = (
        "import sys, memtap\n"
        "memtap.Memory('memory://', spool=False, embedder=False).close()\n"
        "assert 'memtap_proxy.plugin' in sys.modules\n"
    )
    assert imported_after(code, ["uvicorn", "memtap_proxy.cli", "memtap_proxy.server"]) == []


def test_the_command_line_does_not_import_the_proxy_server_until_proxy_runs():
    """Listing the commands (``memtap --help``, and any command: click resolves it among
    the plugins' ones) imports the plugin's command, not the server behind it (~0.09 s)."""
    heavy = ["uvicorn", "starlette", "memtap_proxy.server", "memtap_proxy.app"]
    assert imported_by_the_command_line(["memtap_proxy.cli", *heavy]) == ["memtap_proxy.cli"]


def test_the_gemini_upstream_comes_from_its_flag_its_variable_else_google(monkeypatch):
    import memtap_proxy.server as server

    started = []
    monkeypatch.setattr(server, "open_memory", lambda store, history: memtap.Memory("duckdb:///:memory:"))
    monkeypatch.setattr(server, "serve", lambda config, memory, **kw: started.append(config))
    runner = CliRunner()
    assert runner.invoke(main, ["proxy", "--store", "duckdb:///:memory:"]).exit_code == 0
    assert runner.invoke(main, ["proxy", "--gemini-upstream", "http://127.0.0.1:9/"]).exit_code == 0
    by_env = runner.invoke(main, ["proxy"], env={"MEMTAP_GEMINI_UPSTREAM": "http://127.0.0.1:8/v1beta"})
    assert by_env.exit_code == 0
    refused = runner.invoke(main, ["proxy", "--gemini-upstream", "generativelanguage.googleapis.com"])
    assert refused.exit_code == 2 and "http:// or https://" in refused.output
    assert [c.gemini_upstream for c in started] == [
        "https://generativelanguage.googleapis.com",
        "http://127.0.0.1:9",
        "http://127.0.0.1:8/v1beta",
    ]
    assert "--gemini-upstream" in runner.invoke(main, ["proxy", "--help"]).output
