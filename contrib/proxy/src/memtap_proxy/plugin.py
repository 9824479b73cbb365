"""The memtap plugin of memtap-proxy (entry point ``proxy``): adds ``memtap proxy``.

Every ``Memory`` imports this module with the other plugins: the command (and the server
behind it) is imported only when the command line asks for its commands.
"""

from __future__ import annotations

import click

from memtap import hookimpl


@hookimpl
def memtap_cli_commands(cli: click.Group) -> None:
    """Add ``memtap proxy`` to the ``memtap`` command line."""
    from .cli import proxy

    cli.add_command(proxy)
