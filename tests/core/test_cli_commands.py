"""Plugins add commands to ``memtap`` through the ``memtap_cli_commands`` hook; ``memtap
proxy`` says what to install when no plugin provides it."""

from __future__ import annotations

import warnings

import click
import pytest
from click.testing import CliRunner

from memtap import hookimpl
from memtap.cli.main import MemtapGroup, main
from memtap.memory import plugin_manager
from memtap.plugins import PluginLoadWarning
from memtap.testing.imports import imported_after, imported_by_the_command_line

NEEDS_PROXY = (
    "memtap proxy needs the memtap-proxy package: `pip install memtap-proxy` "
    "(from a clone of memtap: `pip install ./contrib/proxy`)"
)


def fresh_cli(*plugins: object) -> MemtapGroup:
    """A ``memtap`` group with core's own commands and the plugins given (no entry points)."""
    own = {name: command for name, command in main.commands.items() if name != "proxy"}
    group = MemtapGroup(name="memtap", commands=own)
    group.add_plugin_commands(plugin_manager(entry_points=False, extra=plugins))
    return group


class HelloPlugin:
    @hookimpl
    def memtap_cli_commands(self, cli: click.Group) -> None:
        @cli.command()
        @click.argument("name")
        def hello(name: str) -> None:
            """Say hello."""
            click.echo(f"hello {name}")


class ProxyPlugin:
    @hookimpl
    def memtap_cli_commands(self, cli: click.Group) -> None:
        @cli.command("proxy")
        @click.option("--port", type=int, default=1)
        def proxy(port: int) -> None:
            """A proxy."""
            click.echo(f"serving on {port}")


def test_a_plugin_adds_a_command_through_the_hook():
    cli = fresh_cli(HelloPlugin())
    result = CliRunner().invoke(cli, ["hello", "alice"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello alice\n"
    listed = CliRunner().invoke(cli, ["--help"]).output
    assert "hello" in listed and "Say hello." in listed
    assert "stats" in listed  # core's own commands are still there


def test_proxy_without_a_plugin_says_what_to_install():
    cli = fresh_cli(HelloPlugin())
    for args in (["proxy"], ["proxy", "--help"], ["proxy", "--port", "8080"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        assert NEEDS_PROXY in result.output
    assert "proxy" in CliRunner().invoke(cli, ["--help"]).output


def test_a_plugin_providing_proxy_replaces_the_placeholder():
    cli = fresh_cli(ProxyPlugin())
    result = CliRunner().invoke(cli, ["proxy", "--port", "8080"])
    assert result.exit_code == 0, result.output
    assert result.output == "serving on 8080\n"


def test_a_plugin_cannot_replace_a_core_command():
    class Hijack:
        @hookimpl
        def memtap_cli_commands(self, cli: click.Group) -> None:
            @cli.command("stats")
            def stats() -> None:
                click.echo("hijacked")

    with pytest.warns(PluginLoadWarning, match="'stats' is ignored"):
        cli = fresh_cli(Hijack())
    assert cli.commands["stats"] is main.commands["stats"]


def test_a_failing_hook_is_a_warning_and_the_cli_still_works():
    class Broken:
        @hookimpl
        def memtap_cli_commands(self, cli: click.Group) -> None:
            raise RuntimeError("boom")

    with pytest.warns(PluginLoadWarning, match="failed to add its commands: RuntimeError: boom"):
        cli = fresh_cli(Broken())
    result = CliRunner().invoke(cli, ["proxy"])
    assert "pip install memtap-proxy" in result.output


@pytest.mark.slow
def test_core_commands_do_not_load_plugins():
    cli = MemtapGroup(name="memtap", commands={"stats": main.commands["stats"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cli.get_command(click.Context(cli), "stats") is main.commands["stats"]
    assert "proxy" not in cli.commands  # nothing looked beyond core's commands yet
    assert cli.get_command(click.Context(cli), "proxy") is not None


def test_the_command_line_starts_without_rich_and_prints_through_it_when_asked():
    """rich (~0.08 s to import) is imported by the commands that print through it, not by
    ``memtap --help`` nor by a command that serves (``proxy``, ``ui``, ``mcp``)."""
    assert imported_by_the_command_line(["rich", "rich.console", "rich.table"]) == []
    assert imported_by_the_command_line(["rich.table"], args=["plugins"]) == ["rich.table"]


def test_memtap_and_its_command_line_start_without_asyncio():
    """asyncio (~0.05 s to import) is imported by the coroutines that use it, where an event
    loop already runs: ``import memtap`` and ``memtap --help`` do not pay for it."""
    assert imported_after("import memtap", ["asyncio"]) == []
    assert imported_by_the_command_line(["asyncio"]) == []
