"""``memtap mcp``: serve memtap's memory as MCP tools, over stdio or streamable HTTP."""

from __future__ import annotations

import logging
import sys

import click

import memtap
from memtap.sdk.server import STORE_ENV, TokensFileError, is_loopback_host, load_tokens

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8848

log = logging.getLogger("memtap.mcp")


@click.command("mcp")
@click.option(
    "--store",
    "store_url",
    envvar=STORE_ENV,
    default=None,
    metavar="URL",
    help="Store URL ($MEMTAP_STORE; default: the DuckDB file under $MEMTAP_HOME).",
)
@click.option(
    "--entity",
    envvar="MEMTAP_MCP_ENTITY",
    default=None,
    help="The entity a tool call acts as when it names none ($MEMTAP_MCP_ENTITY).",
)
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="With --http: the address to bind.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="With --http: the port.")
@click.option("--path", default="/mcp", show_default=True, help="With --http: the endpoint's path.")
@click.option(
    "--token",
    envvar="MEMTAP_MCP_TOKEN",
    default=None,
    help="With --http: require this token (Authorization: Bearer, or x-memtap-token); it may act "
    "as any entity ($MEMTAP_MCP_TOKEN; needed to bind a non-loopback address).",
)
@click.option(
    "--tokens",
    "tokens_file",
    envvar="MEMTAP_MCP_TOKENS",
    default=None,
    metavar="FILE",
    help="With --http: tokens bound to entities, one `<token> <entity-glob> [<default-entity>]` "
    "per line (the proxy's format).",
)
def mcp(
    store_url: str | None,
    entity: str | None,
    use_http: bool,
    host: str,
    port: int,
    path: str,
    token: str | None,
    tokens_file: str | None,
) -> None:
    """Serve memory as MCP tools (remember, recall, forget, history) to an agent: over
    stdio (default; the agent starts this command), or streamable HTTP with --http."""
    # Imported here, not with the module: every `memtap` command lists this one, and the
    # MCP SDK takes ~0.9 s to import.
    from .server import EntityRules, build_server, http_app

    if not use_http and (token or tokens_file):
        raise click.UsageError("--token and --tokens are for --http (a stdio client is a local process)")
    try:
        rules = EntityRules(entity, token=token, rules=load_tokens(tokens_file) if tokens_file else ())
    except TokensFileError as exc:
        raise click.ClickException(str(exc)) from exc
    if use_http and not is_loopback_host(host) and not rules.needs_token:
        raise click.ClickException(
            f"refusing to listen on {host}: anyone who can reach it could read and change your "
            "memory. Bind 127.0.0.1 (the default), or set --token, or --tokens FILE."
        )
    if not use_http:
        # stdout is the protocol: everything else goes to stderr.
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    mem = memtap.Memory(store_url)
    if not use_http:  # an MCP client's launch may not pass $MEMTAP_HOME: say which store this is
        click.echo(f"memtap mcp: serving store {mem.url} over stdio", err=True)
    try:
        server = build_server(mem, rules)
        if use_http:
            from .http import serve_http

            click.echo(
                f"memtap mcp: streamable HTTP on http://{host}:{port}{path} (store {mem.url})", err=True
            )
            serve_http(http_app(server, rules, host=host, path=path), host=host, port=port)
        else:
            server.run("stdio")
    finally:
        mem.close()
