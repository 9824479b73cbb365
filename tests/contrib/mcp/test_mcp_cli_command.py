"""memtap-mcp adds `memtap mcp` through the `memtap_cli_commands` hook; every other command
of the `memtap` command line starts without the MCP SDK (~0.9 s to import)."""

from __future__ import annotations

from click.testing import CliRunner

from memtap.cli.main import main
from memtap.testing.imports import imported_by_the_command_line


def test_memtap_mcp_is_the_plugins_command():
    result = CliRunner().invoke(main, ["mcp", "--help"], prog_name="memtap")
    assert result.exit_code == 0, result.output
    assert "Usage: memtap mcp [OPTIONS]" in result.output
    assert "--http" in result.output and "--tokens" in result.output


def test_the_command_line_does_not_import_the_mcp_sdk_until_mcp_runs():
    """Listing the commands (``memtap --help``, and any command: click resolves it among
    the plugins' ones) imports each plugin's command, not what runs it."""
    heavy = ["mcp", "memtap_mcp.server", "memtap_mcp.http"]
    assert imported_by_the_command_line(["memtap_mcp.cli", *heavy]) == ["memtap_mcp.cli"]
