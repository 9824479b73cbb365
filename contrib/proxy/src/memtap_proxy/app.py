"""The proxy's ASGI application.

One request's path: refuse what a web page may have sent and check the token and the entity
it names (:mod:`.guard`), check the size limit, route it (agent prefix, protocol
family), answer a ``mem:`` command locally, or inject through the wire protocol's own
``inject`` (the same code as the in-process mode) and forward; relay the answer and capture
it on the side. Everything memtap does on the way fails open: an error forwards the
client's original bytes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from typing import Any

import attrs

from memtap import Memory
from memtap.sdk import (
    VALIDATION_STATUSES,
    AgentProfile,
    Call,
    RequestView,
    WireProtocol,
    detect_profile,
    is_side_call,
    looks_like_agent,
    own_view,
)
from memtap.sdk.server import Grant

from . import gemini, synth
from .arrays import ArrayEvents, array_reader
from .asgi import (
    ClientDisconnected,
    RawHeaders,
    Receive,
    RequestTooLarge,
    Scope,
    Send,
    content_type,
    lifespan,
    read_body,
    send_response,
)
from .attribution import Attributed, DerivedSessions, attribute, header_map
from .bodies import BodyParser
from .commands import Command, CommandContext, parse_command, run_command
from .commit import Commits
from .config import UI_PREFIX, ProxyConfig, check_ui
from .guard import Refused
from .headers import client_response_headers, upstream_request_headers
from .relay import StreamRelay, json_or_none
from .routing import UPSTREAM_FLAGS, Route, is_probe, route, upstream_url
from .splice import dumps, splice
from .upstream import UpstreamError, UpstreamPool, UpstreamResponse

log = logging.getLogger("memtap.proxy")

#: Agents whose URL prefix (``/claude-code/v1/messages``) the proxy recognises.
DEFAULT_AGENTS = frozenset({"claude-code", "codex", "codebuddy", "generic"})
#: The proxy's answer to a probe (``HEAD /``...) for a family without an upstream.
PROBE_ANSWER = b'{"memtap":"proxy","status":"ok"}'


def dump_body(body: Mapping[str, Any]) -> bytes:
    """An edited body as bytes: keys in order, compact, UTF-8 (values keep their JSON types)."""
    return dumps(body).encode()


def edited_body(body: bytes, parsed: Mapping[str, Any], prepared: Mapping[str, Any]) -> bytes:
    """The bytes to send for ``prepared``: the client's ``body`` with only memtap's changes
    written into it (:func:`memtap_proxy.splice.splice`), else ``prepared`` serialised whole."""
    spliced = splice(body, parsed, prepared)
    return spliced if spliced is not None else dump_body(prepared)


@attrs.define
class ProxyStats:
    """Counters since start (read by ``mem:status`` and tests)."""

    requests: int = 0
    intercepted: int = 0
    commands: int = 0
    fail_open: int = 0
    #: Agents' side calls (titles, summaries...): forwarded, neither injected nor stored.
    side_calls: int = 0


class Proxy:
    """The memtap proxy, an ASGI application (:attr:`app`) over one :class:`memtap.Memory`.

    ``memory`` is used as given (the caller closes it). ``ssl_context`` verifies
    ``https://`` upstreams (default: the system's CAs plus certifi's).
    """

    def __init__(
        self,
        config: ProxyConfig,
        memory: Memory,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        self.memory = memory
        # The event loop formats each call once its answer is out (Call.format_after_answer),
        # not the writer as soon as it is queued: the writer wakes once per batch.
        memory.format_in_caller = True
        # Requests are coming: load the embedder's model now, in the background.
        memory.warm_up()
        self.stats = ProxyStats()
        self.protocols: dict[str, WireProtocol] = memory.wire_protocols()
        self.profiles: list[AgentProfile] = memory.agent_profiles()
        self.agents = DEFAULT_AGENTS | {p.name for p in self.profiles}
        #: Sessions derived from conversations that name none.
        self.derived = DerivedSessions()
        #: The profile for agents no other profile knows (memtap-agents' ``generic``).
        self.generic = next((p for p in self.profiles if p.name == "generic"), None)
        self.guard = config.guard()
        #: The families with an upstream (a request naming none goes to one of them).
        self.families = tuple(f for f in ("openai", "anthropic") if config.upstream(f))
        #: Pooled HTTP/1.1 keep-alive connections to the upstreams.
        self.upstream = UpstreamPool(
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            max_connections=config.max_connections,
            ssl_context=ssl_context,
        )
        #: Parses request bodies, reusing what agents send unchanged on every turn.
        self.bodies = BodyParser()
        #: Finished calls journaled (and on a shared store, stored) before their last bytes.
        self.commits = Commits(memory)
        self._warned: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The memory browser under ``/_memtap/`` (``--ui``), with its own guard.
        self.ui = self._make_ui() if config.ui else None

    def _make_ui(self) -> Any:
        check_ui(self.config)
        try:
            from memtap_ui import create_app
        except ImportError as exc:
            raise RuntimeError(
                "memtap proxy --ui needs the memory browser: pip install 'memtap-proxy[ui]' "
                "(from a clone of memtap: pip install ./contrib/ui)"
            ) from exc
        c = self.config
        return create_app(
            self.memory, token=c.token, bound_host=c.host, allow_hosts=c.allow_hosts, form_key=c.ui_form_key
        )

    @property
    def app(self) -> Proxy:
        """The ASGI application: the proxy itself."""
        return self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point: HTTP requests and the server's lifespan."""
        if scope["type"] == "http":
            await self.handle(scope, receive, send)
        elif scope["type"] == "lifespan":
            self._loop = asyncio.get_running_loop()
            await lifespan(receive, send, self.aclose)

    async def aclose(self) -> None:
        """Close the upstream connections."""
        self._loop = None
        await self.upstream.aclose()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The serving event loop (known from the lifespan: ``asyncio.get_running_loop()``
        makes a ``getpid()`` syscall per call on Python 3.11)."""
        return self._loop if self._loop is not None else asyncio.get_running_loop()

    # -- request path ----------------------------------------------------------------------

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request."""
        self.stats.requests += 1
        method: str = scope["method"]
        raw_headers: RawHeaders = scope["headers"]
        raw_path = scope.get("raw_path")
        path = raw_path.decode("latin-1") if raw_path else scope["path"]
        if self.ui is not None and (path == UI_PREFIX or path.startswith(UI_PREFIX + "/")):
            # The browser's pages answer themselves, behind the UI's own guard (a browser
            # cannot send x-memtap-token, and its own forms carry an Origin).
            await self.ui(dict(scope, root_path=scope.get("root_path", "") + UI_PREFIX), receive, send)
            return
        r = route(method, path, raw_headers, self.agents, self.families, scope.get("query_string", b""))
        try:
            grant = self.guard.check(raw_headers, scope.get("server"))
        except Refused as refused:
            return await self._error(send, r.family, refused.status, refused.message)
        try:
            body = await read_body(receive, raw_headers, self.config.max_body)
        except RequestTooLarge:
            limit = self.config.max_body
            return await self._error(
                send,
                r.family,
                413,
                f"memtap proxy: request body larger than the limit of {limit} bytes "
                f"(raise it with --max-body or MEMTAP_PROXY_MAX_BODY)",
            )
        except ClientDisconnected:
            return
        base = self.config.upstream(r.family)
        if base is None and is_probe(method, r.path):
            return await self._probe(send)
        if base is None:
            flag, env = UPSTREAM_FLAGS[r.family]
            message = (
                f"memtap proxy: no {r.family} upstream configured; start it with {flag} URL (or set {env})"
            )
            self._log_unrouted(f"none:{r.family}", "%s (%s %s)", message, method, r.path)
            return await self._error(send, r.family, 502, message)
        if r.guessed:
            self._log_guessed(method, r, base)
        url = upstream_url(base, r.path, scope.get("query_string", b""))
        if r.protocol is not None and method == "POST":
            protocol = self.protocols.get(r.protocol)
            if protocol is not None:
                return await self._intercept(scope, receive, send, r, protocol, body, url, grant)
            self._warn_once(r.protocol)
        await self._forward(scope, receive, send, url, body, identity=False)

    def attribute(
        self,
        headers: RawHeaders,
        body: Mapping[str, Any],
        view: RequestView,
        profile: AgentProfile | None,
        agent: str,
    ) -> Attributed:
        """Who a request belongs to (:func:`memtap_proxy.attribution.attribute`): its
        ``x-memtap-*`` headers, what its agent says in its own traffic, the proxy's
        settings, else a session derived from the conversation. ``view`` is the request
        without the agent's scaffolding."""
        c = self.config
        return attribute(
            headers,
            body,
            view,
            profile,
            agent=agent,
            entity_id=c.entity_id,
            session_id=c.session_id,
            process_id=c.process_id,
            derived=self.derived,
        )

    async def _intercept(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        r: Route,
        protocol: WireProtocol,
        body: bytes,
        url: str,
        grant: Grant,
    ) -> None:
        parsed = self.bodies.parse(body)
        if not isinstance(parsed, dict):  # not ours to judge: the upstream answers it
            return await self._forward(scope, receive, send, url, body, identity=False)
        array = r.mode == "array"
        if array and array_reader(protocol) is None:  # a plugin that cannot read the stream
            return await self._forward(scope, receive, send, url, body, identity=False)
        self.stats.intercepted += 1
        raw_headers = scope["headers"]
        call: Call | None = None
        sent = body
        # What memtap reads and captures: Gemini names its model in the URL, not the body.
        read = gemini.with_url_model(parsed, r.model)
        try:
            view = protocol.read_request(read)  # the body is read once, here
            headers = header_map(raw_headers)
            profile = self.profile(r, view.system, parsed, view, headers)
            if is_side_call(profile, view, headers, parsed):  # a title, a routing score...
                raise _SideCall
            own = own_view(profile, view)  # the agent's scaffolding is not the user
            agent = profile.name if profile is not None else r.agent or "generic"
            attributed = self.attribute(raw_headers, parsed, own, profile, agent)
            # Before memory is read: the entity must be one the token may act as.
            bound = self.guard.bind(grant, attributed.attribution, raw_headers)
            if bound is not attributed.attribution:
                attributed = attrs.evolve(attributed, attribution=bound)
            command = parse_command(own)
            if command is not None:
                return await self._command(send, command, attributed, protocol, agent, parsed, grant, r.mode)
            call = self.memory.tap.begin(
                protocol,
                attribution=attributed.attribution,
                agent=r.agent,
                profile=profile,
                history=attributed.history,
            )
            call.usage_with_injection_only = True  # an agent's bytes as sent, unless injected into
            # Journaled before its last bytes go out, formatted once they are out.
            call.format_after_answer = True
            call.span.set_attribute("memtap.agent", agent)
            call.span.set_attribute("memtap.session.source", attributed.session_source)
            # Inline: injectors must be fast (hookspec contract); a thread hop would cost
            # more than the work (and its GIL hand-offs add milliseconds under load). Only
            # a session's first read from the store runs in a thread, awaited a bounded time.
            prepared = await call.prepare_async(read, view=own)
            if prepared is not read:
                sent = edited_body(body, parsed, gemini.without_url_model(prepared, read, parsed))
        except Refused as refused:  # before memory is read: the entity is not the token's
            return await self._error(send, r.family, refused.status, refused.message)
        except _SideCall:  # the agent's own side call: not conversation, passed through
            self.stats.side_calls += 1
            return await self._forward(scope, receive, send, url, body, identity=False)
        except Exception:
            self.stats.fail_open += 1
            log.exception("memtap failed on a %s request; forwarding it unchanged", protocol.name)
            sent = body
        await self._forward(
            scope,
            receive,
            send,
            url,
            sent,
            identity=True,
            call=call,
            protocol=protocol,
            original=body if sent is not body else None,
            array=array,
        )

    def profile(
        self,
        r: Route,
        system: str | None,
        body: Mapping[str, Any],
        view: RequestView,
        headers: Mapping[str, str] | None = None,
    ) -> AgentProfile | None:
        """The agent profile of a request: its URL prefix's, else the one its system
        prompt's fingerprint names, else one that knows the agent by its ``headers``
        (lower-case names; a side call's own system prompt may name no agent), else the
        ``generic`` profile for a request that looks like an unknown agent's (read
        conservatively: its scaffolding and its model's answers are not the user's);
        ``None``: no profile knows it."""
        found = detect_profile(self.profiles, system, name=r.agent)
        if found is None and headers:
            found = detect_by_headers(self.profiles, headers)
        if found is None and self.generic is not None and looks_like_agent(body, view):
            return self.generic
        return found

    async def _command(
        self,
        send: Send,
        command: Command,
        attributed: Attributed,
        protocol: WireProtocol,
        agent: str,
        body: dict[str, Any],
        grant: Grant,
        mode: str | None = None,
    ) -> None:
        self.stats.commands += 1
        ctx = CommandContext(
            self.memory,
            attributed.attribution,
            protocol.name,
            agent,
            grant.every_entity,
            attributed.session_source,
        )
        text = await asyncio.to_thread(run_command, command, ctx)
        if mode is not None:  # Gemini: the URL says the model and how to answer
            data, media_type = gemini.answer(text, str(body.get("model") or "memtap"), mode)
        else:
            data, media_type, _ = synth.answer(protocol.name, text, body)
        await send_response(send, 200, [content_type(media_type)], data)

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        url: str,
        body: bytes,
        *,
        identity: bool,
        call: Call | None = None,
        protocol: WireProtocol | None = None,
        original: bytes | None = None,
        array: bool = False,
    ) -> None:
        """Send ``body`` upstream and relay the answer; with a ``call``, capture it: SSE and
        (``array``: Gemini's ``streamGenerateContent`` without ``alt=sse``) a JSON array
        read as they stream, anything else read whole."""
        headers = upstream_request_headers(scope["headers"], identity=identity)
        family = PROVIDER_FAMILIES.get(protocol.provider, "openai") if protocol is not None else "openai"
        try:
            upstream = await self.upstream.request(scope["method"], url, headers, body)
            if original is not None and call is not None and upstream.status in VALIDATION_STATUSES:
                upstream = await self._resend_rejected(
                    scope["method"], url, headers, original, upstream, call
                )
        except UpstreamError as exc:
            if call is not None:
                call.failed(exc)
            return await self._error(
                send,
                family,
                502,
                f"memtap proxy: upstream {url.split('?')[0]} unreachable ({type(exc).__name__}: {exc})",
            )
        if call is None:  # passed through: relayed as is, whatever it is
            relay = StreamRelay(upstream, client_response_headers(upstream.headers, keep_length=True))
            return await relay(receive, send, self.loop())
        sse = (upstream.header(b"content-type") or b"").startswith(b"text/event-stream")
        # A JSON array is read as it streams (an error answer: whole).
        streamed_array = not sse and array and 200 <= upstream.status < 300
        reader = array_reader(protocol) if streamed_array else None
        if not sse and reader is None:
            return await self._relay_whole(send, upstream, call, family)
        relay = StreamRelay(
            upstream,
            client_response_headers(upstream.headers, keep_length=False),
            call=call,
            protocol=protocol,
            hide_usage=sse and call.hide_usage_event,
            commits=self.commits,
            array=ArrayEvents(reader) if reader is not None else None,
        )
        return await relay(receive, send, self.loop())

    async def _relay_whole(self, send: Send, upstream: UpstreamResponse, call: Call, family: str) -> None:
        """A non-streamed answer: read it whole, capture it (journaled; on a shared store,
        stored: :class:`~memtap_proxy.commit.Commits`), then send it."""
        try:
            data = await upstream.read()
        except UpstreamError as exc:
            call.failed(exc)
            return await self._error(
                send, family, 502, f"memtap proxy: upstream answer cut ({type(exc).__name__})"
            )
        finally:
            upstream.close()
        status = upstream.status
        # Journaled before the client can have any of the answer (a kill -9 after the
        # client has it loses nothing), and in the history before its next request is read.
        await self.commits.finish(call, lambda: _capture_whole(call, status, data), self.loop())
        await send_response(send, status, client_response_headers(upstream.headers, keep_length=False), data)
        call.format_captured()

    async def _resend_rejected(
        self,
        method: str,
        url: str,
        headers: RawHeaders,
        original: bytes,
        rejected: UpstreamResponse,
        call: Call,
    ) -> UpstreamResponse:
        """The upstream rejected (400/422) a request memtap changed: send the client's own
        bytes once instead (``Call.resend_after`` counts and logs it), and relay that answer."""
        if not call.may_resend:
            return rejected
        try:
            detail = await rejected.read()  # an error answer: small; read for the log
        finally:
            rejected.close()
        call.resend_after(UpstreamStatusError(rejected.status, detail))
        return await self.upstream.request(method, url, headers, original)

    # -- helpers ---------------------------------------------------------------------------

    async def _probe(self, send: Send) -> None:
        """Answer a probe no upstream can take: the proxy is there (the server leaves out
        the body of an answer to ``HEAD``)."""
        await send_response(send, 200, [content_type("application/json")], PROBE_ANSWER)

    async def _error(self, send: Send, family: str, status: int, message: str) -> None:
        body = synth.error_body(family, status, message)
        await send_response(send, status, [content_type("application/json")], body)

    def _log_unrouted(self, key: str, message: str, *args: Any) -> None:
        """Log a request the proxy cannot route anywhere sensible, once per ``key``."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    def _log_guessed(self, method: str, r: Route, base: str) -> None:
        """A request no route, header or prefix names a family for went to a default
        upstream: say so once per first path segment, and what to configure."""
        segment = r.path.split("/", 2)[1] if r.path.count("/") >= 1 else r.path
        self._log_unrouted(
            f"guessed:{segment}",
            "memtap proxy: %s %s matches no API route memtap knows (OpenAI /v1/..., Anthropic "
            "/v1/messages, Gemini /v1beta/models/...): sent to the %s upstream %s as it is. If "
            "the client speaks another API, give the proxy that upstream (--openai-upstream, "
            "--anthropic-upstream, --gemini-upstream) and check the client's base URL is the "
            "proxy's address with no path added.",
            method,
            r.path,
            r.family,
            base,
        )

    def _warn_once(self, protocol: str) -> None:
        if protocol not in self._warned:
            self._warned.add(protocol)
            package = "memtap-" + protocol.split(".", 1)[0]
            log.warning(
                "no installed plugin speaks %s: passing those requests through without memory "
                "(pip install %s)",
                protocol,
                package,
            )


#: The error family of each wire protocol's provider (errors in the client's own shape).
PROVIDER_FAMILIES = {"anthropic": "anthropic", "gcp.gemini": gemini.FAMILY}


class _SideCall(Exception):
    """The request is its agent's own side call (routing, titles, checks): passed through."""


def detect_by_headers(profiles: list[AgentProfile], headers: Mapping[str, str]) -> AgentProfile | None:
    """The first profile whose optional ``detect_headers(headers)`` knows the request."""
    for profile in profiles:
        check = getattr(profile, "detect_headers", None)
        if callable(check) and check(headers):
            return profile
    return None


def _capture_whole(call: Call, status: int, data: bytes) -> None:
    """Capture a non-streamed answer (errors are logged, never raised: it is sent)."""
    try:
        if 200 <= status < 300:
            call.succeeded(data, json_or_none)
        else:
            call.failed(UpstreamStatusError(status))
    except Exception:
        log.exception("memtap could not capture an answer")


class UpstreamStatusError(Exception):
    """The upstream answered with an error status (recorded on the call's span); ``detail``
    is the start of its answer, for the log."""

    def __init__(self, status: int, detail: bytes = b"") -> None:
        text = detail[:300].decode("utf-8", "replace")
        super().__init__(f"upstream answered HTTP {status}" + (f": {text}" if text else ""))
        self.status = status
