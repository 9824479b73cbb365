"""``memtap proxy`` (also installed as ``memtap-proxy``)."""

from __future__ import annotations

import logging
import secrets
import socket
import sys

import click

from memtap.sdk.server import STORE_ENV, load_tokens

from .config import DEFAULT_HOST, DEFAULT_MAX_BODY, DEFAULT_PORT, ENV, ProxyConfig, check_bind, check_ui
from .workers import check_shared_store, serve_workers

_DEFAULTS = ProxyConfig()
_SECONDS = click.FloatRange(min=0, min_open=True)


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
    "--gemini-upstream",
    envvar=ENV["gemini_upstream"],
    default=_DEFAULTS.gemini_upstream,
    show_default=True,
    metavar="URL",
    help="Where Gemini API requests (/v1beta/models/...) go ($MEMTAP_GEMINI_UPSTREAM).",
)
@click.option(
    "--token",
    envvar=ENV["token"],
    default=None,
    help="Require this value in the x-memtap-token header; it may act as any entity "
    "(a token is needed to bind a non-loopback address).",
)
@click.option(
    "--tokens",
    "tokens_file",
    envvar=ENV["tokens"],
    default=None,
    metavar="FILE",
    help="Tokens bound to entities: one `<token> <entity-glob> [<default-entity>]` per line.",
)
@click.option(
    "--allow-origin",
    "allow_origins",
    envvar=ENV["allow_origin"],
    multiple=True,
    metavar="ORIGIN",
    help="A web page origin allowed to call the proxy, e.g. http://localhost:3000 (repeatable; "
    "other pages are refused).",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    envvar=ENV["allow_host"],
    multiple=True,
    metavar="NAME",
    help="A host name clients reach the proxy by, besides localhost and loopback addresses (repeatable).",
)
@click.option(
    "--max-body",
    envvar=ENV["max_body"],
    default=DEFAULT_MAX_BODY,
    show_default=True,
    type=int,
    help="Request size limit in bytes.",
)
@click.option(
    "--header-timeout",
    envvar=ENV["header_timeout"],
    default=_DEFAULTS.header_timeout,
    show_default=True,
    type=_SECONDS,
    help="Seconds a request's head may take to arrive.",
)
@click.option(
    "--body-timeout",
    envvar=ENV["body_timeout"],
    default=_DEFAULTS.body_timeout,
    show_default=True,
    type=_SECONDS,
    help="Seconds a request's body may take to arrive.",
)
@click.option(
    "--max-clients",
    envvar=ENV["max_clients"],
    default=_DEFAULTS.max_clients,
    show_default=True,
    type=click.IntRange(min=1),
    help="Open client connections at most.",
)
@click.option(
    "--drain-timeout",
    envvar=ENV["drain_timeout"],
    default=_DEFAULTS.drain_timeout,
    show_default=True,
    type=_SECONDS,
    help="Seconds requests under way get to finish on SIGTERM or Ctrl-C.",
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
@click.option(
    "--workers",
    envvar=ENV["workers"],
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Worker processes accepting on the one port (more than 1 needs a shared store: postgresql://...).",
)
@click.option(
    "--ui",
    is_flag=True,
    default=False,
    help="Serve the memory browser under /_memtap/ (needs memtap-ui: pip install 'memtap-proxy[ui]').",
)
@click.option("--log-level", default="info", show_default=True)
def proxy(
    host: str,
    port: int,
    store_url: str | None,
    openai_upstream: str | None,
    anthropic_upstream: str | None,
    gemini_upstream: str | None,
    token: str | None,
    tokens_file: str | None,
    allow_origins: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    max_body: int,
    header_timeout: float,
    body_timeout: float,
    max_clients: int,
    drain_timeout: float,
    entity: str,
    session: str | None,
    process: str | None,
    history_messages: int | None,
    workers: int,
    ui: bool,
    log_level: str,
) -> None:
    """Run memtap as a local proxy: point an agent's base URL at it and it gets memory."""
    try:
        config = ProxyConfig(
            openai_upstream=openai_upstream,
            anthropic_upstream=anthropic_upstream,
            gemini_upstream=gemini_upstream,
            host=host,
            port=port,
            token=token,
            tokens=load_tokens(tokens_file) if tokens_file else (),
            allow_origins=allow_origins,
            allow_hosts=allow_hosts,
            max_body=max_body,
            entity_id=entity,
            session_id=session,
            process_id=process,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            max_clients=max_clients,
            drain_timeout=drain_timeout,
            ui=ui,
            # One key for the forms of every worker (made before they are forked).
            ui_form_key=secrets.token_bytes(32) if ui else None,
        )
        check_bind(config)
        check_ui(config)
        check_shared_store(store_url, workers)
        if ui:
            _check_ui_installed()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not config.openai_upstream and not config.anthropic_upstream:
        click.echo(
            "warning: no upstream configured; set --openai-upstream and/or --anthropic-upstream",
            err=True,
        )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The server (uvicorn, starlette: ~0.1 s) is imported when the proxy runs, not by every
    # ``memtap`` command listing this one.
    from .server import open_memory, serve

    if workers > 1:

        def run_worker(sock: socket.socket, parent_pid: int) -> None:
            memory = open_memory(store_url, history_messages)
            try:
                serve(config, memory, log_level=log_level, sock=sock, parent_pid=parent_pid)
            finally:
                memory.close()

        try:
            code = serve_workers(config, workers, run_worker)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {config.host}:{config.port}: {exc}") from exc
        sys.exit(code)
    memory = open_memory(store_url, history_messages)
    click.echo(f"memtap proxy: serving store {memory.url}", err=True)
    try:
        serve(config, memory, log_level=log_level)
    finally:
        memory.close()


def _check_ui_installed() -> None:
    try:
        import memtap_ui  # noqa: F401
    except ImportError as exc:
        raise ValueError(
            "--ui needs the memory browser: pip install 'memtap-proxy[ui]' "
            "(from a clone of memtap: pip install ./contrib/ui)"
        ) from exc


main = proxy
