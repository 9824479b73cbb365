"""``memtap ui``: the memory browser over a store."""

from __future__ import annotations

import logging

import click

from memtap.sdk.server import STORE_ENV, open_existing_memory

from .config import DEFAULT_HOST, DEFAULT_PORT
from .guard import check_bind

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
    # The web application (starlette, jinja2, uvicorn: ~0.16 s) is imported when the UI
    # runs, not by every ``memtap`` command listing this one.
    from .server import serve

    with open_existing_memory(store_url) as memory:  # a missing store is an error, never a new empty one
        shown = f"[{host}]" if ":" in host else host
        login = f"?token={token}" if token else ""
        click.echo(f"memtap UI on http://{shown}:{port}/{login} (store {memory.url}); Ctrl-C stops it")
        serve(memory, host=host, port=port, token=token, allow_hosts=allow_hosts, log_level=log_level)
