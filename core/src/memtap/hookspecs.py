"""The hooks a memtap plugin can implement.

Five families follow a call's path: provider matching, request injection (with the anchor
strategies, agent profiles, that say where injected blocks go), stream accumulation,
payload formatting and storage. Two more extend memtap around that path: embedders (vectors
for recall) and CLI commands (subcommands of ``memtap``).

Every hook is prefixed ``memtap_`` and documented in ``docs/hooks.md`` with its exact
signature (a test keeps the two in step). Implement a hook with :data:`memtap.hookimpl`::

    from memtap import hookimpl

    @hookimpl
    def memtap_match_client(client):
        if type(client).__module__.startswith("acme"):
            return AcmeAdapter()

and list the module under the ``memtap`` entry-point group of your distribution.
Cross-cutting concerns (redaction, enrichment, tracing) use ``@hookimpl(wrapper=True)``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from memtap.protocol.markers import PROJECT_NAME, hookimpl, hookspec

if TYPE_CHECKING:
    import click

    from memtap.protocol.anchors import AgentProfile
    from memtap.protocol.embedder import Embedder
    from memtap.protocol.model import Exchange
    from memtap.protocol.wire import (
        ClientAdapter,
        Injection,
        InjectionRequest,
        RawExchange,
        StreamAccumulator,
        WireProtocol,
    )
    from memtap.storage.store import Store

#: The markers are defined with the contracts (rooms mark their default plugins with them
#: without importing these specifications) and re-exported here, where plugins find them.
__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]


# ---------------------------------------------------------------------------------------
# 1. Provider matching
# ---------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def memtap_match_client(client: Any) -> ClientAdapter | None:
    """Recognise an SDK client object (or module, e.g. ``litellm``) and return the adapter
    that patches it, or ``None`` when the client is not yours.

    Called by :meth:`memtap.Memory.register`; the first non-``None`` answer wins. Match on
    the client's type and module without importing the SDK when it is not already imported.
    """


@hookspec
def memtap_wire_protocols() -> Sequence[WireProtocol]:
    """Return the wire protocols (request/response formats) this plugin speaks.

    Each protocol has a unique ``name`` such as ``"openai.chat"``. The proxy uses them to
    route HTTP requests; in-process adapters use the same objects, so both modes read and
    edit bodies with one piece of code.
    """


# ---------------------------------------------------------------------------------------
# 2. Request injection
# ---------------------------------------------------------------------------------------


@hookspec
def memtap_request_injections(request: InjectionRequest) -> Sequence[Injection] | None:
    """Contribute what should be injected into one outgoing request.

    ``request`` carries the attribution, the protocol and the request's own messages. Return
    :class:`memtap.protocol.wire.HistoryInjection` (earlier turns to put in front of the messages) or
    :class:`memtap.protocol.wire.SystemBlock` items (text for the place the provider reads system
    text), or ``None``. Runs on the request path: be fast; anything slow must have a deadline.
    Core's built-in ``history`` plugin (earlier turns of the session) and ``recall`` plugin
    (the entity's recalled facts, a ``memory`` system block) implement this hook.
    """


@hookspec
def memtap_request_prefetch(request: InjectionRequest) -> Awaitable[None] | None:
    """Start, for a call made on an event loop, what :func:`memtap_request_injections` would
    wait for, and return an awaitable of it (or ``None``: nothing to wait for).

    Called only where the call is prepared on an asyncio event loop (the HTTP proxy, async
    SDK clients), with the same ``request`` that ``memtap_request_injections`` then gets.
    memtap awaits each returned awaitable in the calling task, one after the other, before
    it asks for the injections: what an implementation sets in a :class:`contextvars.ContextVar`
    there is seen by its ``memtap_request_injections``. Bound the wait yourself; an exception
    is logged and the call goes on. Core's ``history`` plugin awaits the session's read from
    the store here, and its ``recall`` plugin the full model's vector of the question, so
    that the loop serves its other requests meanwhile.
    """


# ---------------------------------------------------------------------------------------
# 3. Stream accumulation
# ---------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def memtap_stream_accumulator(protocol: WireProtocol) -> StreamAccumulator | None:
    """Return a fresh accumulator for one streamed response in ``protocol``.

    The accumulator is fed every event (as the wire's JSON object) in order and finalised
    exactly once. The default answer is the protocol's own
    (:func:`memtap.protocol.wire.default_accumulator`); implement this hook only to replace
    a protocol's accumulator.
    """


# ---------------------------------------------------------------------------------------
# 4. Payload formatting
# ---------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def memtap_format_exchange(raw: RawExchange) -> Exchange | None:
    """Turn one raw call (request body as sent by the app, response data, injection record,
    attribution, timings) into the canonical :class:`memtap.protocol.model.Exchange`.

    Core's default implementation reads the body through ``raw.protocol``. Wrappers
    (``@hookimpl(wrapper=True)``) may change the result: core's ``redact`` plugin removes
    secrets this way, after every other implementation.
    """


# ---------------------------------------------------------------------------------------
# 5. Storage
# ---------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def memtap_open_store(url: str) -> Store | None:
    """Open the store for ``url`` (migrating its schema) if the URL's scheme is yours.

    Return ``None`` for schemes you do not handle. Raise :class:`memtap.StoreError` with a
    message that says what to do when the URL is yours but cannot be opened.
    """


@hookspec
def memtap_store_schemes() -> Sequence[str]:
    """Return the URL schemes this plugin's :func:`memtap_open_store` accepts
    (e.g. ``["duckdb"]``); used to list what is installed in error messages."""


# ---------------------------------------------------------------------------------------
# Anchor strategies (agent profiles; part of request injection)
# ---------------------------------------------------------------------------------------


@hookspec
def memtap_agent_profiles() -> Sequence[AgentProfile]:
    """Return the agent profiles this plugin knows (:class:`memtap.protocol.anchors.AgentProfile`).

    A profile recognises one agent (Claude Code, Codex, ...) by name (the proxy's URL
    prefix, ``/claude-code/...``) or by its system prompt's fingerprint, splits that prompt
    into segments that join back byte for byte, and resolves semantic slots (``"memory"``,
    ``"skills"``...) to segments, so :func:`memtap.protocol.anchors.place` can put a block where that
    agent keeps such content. Profiles of all plugins are tried in registration order.
    """


# ---------------------------------------------------------------------------------------
# Embedders (vectors for recall)
# ---------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def memtap_embedder(spec: str) -> Embedder | None:
    """Return an embedder for ``spec`` if it names one of yours, else ``None``.

    ``spec`` comes from ``memtap.Memory(embedder=...)`` or ``$MEMTAP_EMBEDDER``:
    ``"default"`` (answer it only with a local embedder that needs no configuration),
    a plugin's own name (``"minilm"``) or ``"<plugin>:<model>"`` (``"litellm:text-embedding-3-small"``).
    The embedder (:class:`memtap.longterm.embedding.Embedder`) has a ``name`` identifying its vector
    space and ``embed(texts)`` returning one vector per text; build it cheaply and load
    models on first use. It is called from background threads, and once per recall for the
    query (under a deadline).
    """


# ---------------------------------------------------------------------------------------
# CLI commands (subcommands of ``memtap``)
# ---------------------------------------------------------------------------------------


@hookspec
def memtap_cli_commands(cli: click.Group) -> None:
    """Add your commands to the ``memtap`` command line: ``cli`` is its click group.

    Called once, the first time the command line looks beyond its own commands (``memtap
    --help``, or a command it does not have itself)::

        @hookimpl
        def memtap_cli_commands(cli):
            @cli.command()
            def hello():
                click.echo("hello")

    Keep the module holding this hook light (it is imported by every ``Memory``): import
    what the command needs inside the hook or the command.
    """
