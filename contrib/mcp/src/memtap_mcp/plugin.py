"""The memtap plugin of memtap-mcp (entry point ``mcp``): adds ``memtap mcp``.

Every ``Memory`` imports this module with the other plugins: the command (and the MCP SDK
behind it) is imported only when the command line asks for its commands.
"""

from __future__ import annotations

import click

from memtap import hookimpl


@hookimpl
def memtap_cli_commands(cli: click.Group) -> None:
    """Add ``memtap mcp`` to the ``memtap`` command line."""
    from .cli import mcp

    cli.add_command(mcp)
