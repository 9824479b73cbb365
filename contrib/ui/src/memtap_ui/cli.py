"""``memtap ui``: the memory browser over a store."""

from __future__ import annotations

import logging

import click

from memtap import Memory
from memtap.sdk import STORE_ENV, StoreError

from .guard import check_bind
from .server import DEFAULT_HOST, DEFAULT_PORT, serve

TOKEN_ENV = "MEMTAP_UI_TOKEN"


@click.command("ui")
@click.option(
    "--store", "store_url", envvar=STORE_ENV, default=None, metavar="URL", help="Store URL ($MEMTAP_STORE)."
)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    default=None,
    help=f"Require this token from every request (open the UI once with ?token=...; ${TOKEN_ENV}). "
    "Needed to bind an address beyond loopback.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name the UI is reached by, besides localhost and loopback addresses (repeatable).",
)
@click.option("--log-level", default="info", show_default=True)
def ui(
    store_url: str | None,
    host: str,
    port: int,
    token: str | None,
    allow_hosts: tuple[str, ...],
    log_level: str,
) -> None:
    """Browse memory in a web browser: entities, facts, sessions, and what memtap injected
    into each call and why."""
    try:
        check_bind(host, token)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        memory = Memory(store_url)
    except StoreError as exc:
        if not _held_by_another_process(exc):
            raise
        raise click.ClickException(locked_store_line(exc)) from None
    with memory:
        shown = f"[{host}]" if ":" in host else host
        login = f"?token={token}" if token else ""
        click.echo(f"memtap UI on http://{shown}:{port}/{login} (store {memory.url}); Ctrl-C stops it")
        serve(memory, host=host, port=port, token=token, allow_hosts=allow_hosts, log_level=log_level)


def _held_by_another_process(exc: BaseException) -> bool:
    """Whether opening the store failed because another process holds the file."""
    text = f"{exc} {exc.__cause__ or ''}".lower()
    return "another process" in text or "lock" in text


def locked_store_line(exc: StoreError) -> str:
    """One line for a store another process holds: the ways out, not DuckDB's error."""
    where = str(exc).split("'", 2)[1] if str(exc).count("'") >= 2 else "the store"
    return (
        f"{where} is open in another process (a DuckDB file has one at a time). Browse it from "
        "that process instead: memtap_ui.start(mem) in the app, or memtap proxy --ui for the "
        "proxy; or move to a store every process can share: --store postgresql://..."
    )
