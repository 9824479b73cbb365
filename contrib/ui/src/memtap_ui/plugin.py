"""The memtap plugin of memtap-ui (entry point ``ui``): adds ``memtap ui``.

Every ``Memory`` imports this module with the other plugins: the command (and the web
application behind it) is imported only when the command line asks for its commands.
"""

from __future__ import annotations

import click

from memtap import hookimpl


@hookimpl
def memtap_cli_commands(cli: click.Group) -> None:
    """Add ``memtap ui`` to the ``memtap`` command line."""
    from .cli import ui

    cli.add_command(ui)
