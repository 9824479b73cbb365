"""``memtap proxy`` (also installed as ``memtap-proxy``)."""

from __future__ import annotations

import logging

import click

from memtap.memory import STORE_ENV

from .config import DEFAULT_HOST, DEFAULT_MAX_BODY, DEFAULT_PORT, ENV, ProxyConfig, check_bind
from .server import open_memory, serve


@click.command("proxy")
@click.option("--host", envvar=ENV["host"], default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--port", envvar=ENV["port"], default=DEFAULT_PORT, show_default=True, type=int)
@click.option(
    "--store", "store_url", envvar=STORE_ENV, default=None, metavar="URL", help="Store URL ($MEMTAP_STORE)."
)
@click.option(
    "--openai-upstream",
    envvar=ENV["openai_upstream"],
    default=None,
    metavar="URL",
    help="Where OpenAI-protocol requests go, e.g. https://api.openai.com ($MEMTAP_OPENAI_UPSTREAM).",
)
@click.option(
    "--anthropic-upstream",
    envvar=ENV["anthropic_upstream"],
    default=None,
    metavar="URL",
    help="Where Anthropic-protocol requests go, e.g. https://api.anthropic.com ($MEMTAP_ANTHROPIC_UPSTREAM).",
)
@click.option(
    "--token",
    envvar=ENV["token"],
    default=None,
    help="Require this value in the x-memtap-token header (needed to bind a non-loopback address).",
)
@click.option(
    "--max-body",
    envvar=ENV["max_body"],
    default=DEFAULT_MAX_BODY,
    show_default=True,
    type=int,
    help="Request size limit in bytes.",
)
@click.option("--entity", default="default", show_default=True, help="Entity when x-memtap-entity is absent.")
@click.option(
    "--session",
    default=None,
    help="One session for every request without x-memtap-session (default: the agent's own "
    "session id, else one derived from each conversation).",
)
@click.option("--process", default=None, help="Process when x-memtap-process is absent.")
@click.option(
    "--history-messages",
    default=None,
    type=int,
    help="At most this many earlier messages injected per request (0: no history; default 20).",
)
@click.option("--log-level", default="info", show_default=True)
def proxy(
    host: str,
    port: int,
    store_url: str | None,
    openai_upstream: str | None,
    anthropic_upstream: str | None,
    token: str | None,
    max_body: int,
    entity: str,
    session: str | None,
    process: str | None,
    history_messages: int | None,
    log_level: str,
) -> None:
    """Run memtap as a local proxy: point an agent's base URL at it and it gets memory."""
    try:
        config = ProxyConfig(
            openai_upstream=openai_upstream,
            anthropic_upstream=anthropic_upstream,
            host=host,
            port=port,
            token=token,
            max_body=max_body,
            entity_id=entity,
            session_id=session,
            process_id=process,
        )
        check_bind(config)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not config.openai_upstream and not config.anthropic_upstream:
        click.echo(
            "warning: no upstream configured; set --openai-upstream and/or --anthropic-upstream",
            err=True,
        )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    memory = open_memory(store_url, history_messages)
    try:
        serve(config, memory, log_level=log_level)
    finally:
        memory.close()


main = proxy
