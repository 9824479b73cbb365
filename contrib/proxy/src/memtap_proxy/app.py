"""The proxy's ASGI application.

One request's path: check the token and the size limit, route it (agent prefix, protocol
family), answer a ``mem:`` command locally, or inject through the wire protocol's own
``inject`` (the same code as the in-process mode) and forward; relay the answer and capture
it on the side. Everything memtap does on the way fails open: an error forwards the
client's original bytes.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio.to_thread
import attrs
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from memtap import Memory
from memtap.anchors import AgentProfile, detect_profile
from memtap.model import Attribution
from memtap.tap import Call
from memtap.wire import WireProtocol

from . import synth
from .commands import Command, CommandContext, parse_command, run_command
from .config import ProxyConfig
from .headers import client_response_headers, header, upstream_request_headers
from .relay import StreamRelay, json_or_none
from .routing import UPSTREAM_FLAGS, Route, route, upstream_url

log = logging.getLogger("memtap.proxy")

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
#: Agents whose URL prefix (``/claude-code/v1/messages``) the proxy recognises.
DEFAULT_AGENTS = frozenset({"claude-code", "codex", "codebuddy", "generic"})
_MAX_ATTRIBUTION = 200


class RequestTooLarge(Exception):
    """The request body exceeds the configured limit."""


def dump_body(body: Mapping[str, Any]) -> bytes:
    """An edited body as bytes: keys in order, compact, UTF-8 (values keep their JSON types)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _session_from_body(body: Mapping[str, Any]) -> str | None:
    """Claude Code's ``metadata.user_id`` ends in ``_session_<uuid>``: its session."""
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    if isinstance(user_id, str) and "_session_" in user_id:
        return user_id.rsplit("_session_", 1)[1][:_MAX_ATTRIBUTION] or None
    return None


@attrs.define
class ProxyStats:
    """Counters since start (read by ``mem:status`` and tests)."""

    requests: int = 0
    intercepted: int = 0
    commands: int = 0
    fail_open: int = 0


class Proxy:
    """The memtap proxy: an ASGI app (:attr:`app`) over one :class:`memtap.Memory`.

    ``memory`` is used as given (the caller closes it); ``transport`` replaces httpx's
    network transport (tests).
    """

    def __init__(
        self,
        config: ProxyConfig,
        memory: Memory,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.memory = memory
        self.stats = ProxyStats()
        self.protocols: dict[str, WireProtocol] = {
            p.name: p for group in memory.pm.hook.memtap_wire_protocols() for p in group or ()
        }
        self.profiles: list[AgentProfile] = [
            p for group in memory.pm.hook.memtap_agent_profiles() for p in group or ()
        ]
        self.agents = DEFAULT_AGENTS | {p.name for p in self.profiles}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._warned: set[str] = set()
        self.app = Starlette(
            routes=[StarletteRoute("/{path:path}", self.handle, methods=METHODS)],
            lifespan=self._lifespan,
        )

    # -- lifecycle -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.aclose()

    @property
    def client(self) -> httpx.AsyncClient:
        """The pooled upstream client (HTTP/1.1 keep-alive), created on first use."""
        if self._client is None:
            c = self.config
            self._client = httpx.AsyncClient(
                transport=self._transport,
                timeout=httpx.Timeout(c.read_timeout, connect=c.connect_timeout),
                limits=httpx.Limits(max_connections=c.max_connections, max_keepalive_connections=64),
                follow_redirects=False,
                trust_env=False,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the upstream connection pool."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    # -- request path ----------------------------------------------------------------------

    async def handle(self, request: Request) -> Response | StreamRelay:
        """Serve one request (Starlette endpoint)."""
        self.stats.requests += 1
        raw_headers = request.scope["headers"]
        r = route(request.method, request.url.path, raw_headers, self.agents)
        token = self.config.token
        if token and not hmac.compare_digest(
            (header(raw_headers, b"x-memtap-token") or "").encode(), token.encode()
        ):
            return self._error(r.family, 401, "memtap proxy: missing or wrong x-memtap-token header")
        try:
            body = await self._read_body(request)
        except RequestTooLarge:
            limit = self.config.max_body
            return self._error(
                r.family,
                413,
                f"memtap proxy: request body larger than the limit of {limit} bytes "
                f"(raise it with --max-body or MEMTAP_PROXY_MAX_BODY)",
            )
        base = self.config.upstream(r.family)
        if base is None:
            flag, env = UPSTREAM_FLAGS[r.family]
            return self._error(
                r.family,
                502,
                f"memtap proxy: no {r.family} upstream configured; start it with {flag} URL (or set {env})",
            )
        url = upstream_url(base, r.path, request.scope.get("query_string", b""))
        if r.protocol is not None and request.method == "POST":
            protocol = self.protocols.get(r.protocol)
            if protocol is not None:
                return await self._intercept(request, r, protocol, body, url)
            self._warn_once(r.protocol)
        return await self._forward(request, url, body, identity=False)

    async def _read_body(self, request: Request) -> bytes:
        limit = self.config.max_body
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge
            chunks.append(chunk)
        return b"".join(chunks)

    def attribution(self, headers: list[tuple[bytes, bytes]], body: Mapping[str, Any]) -> Attribution:
        """``x-memtap-entity`` / ``-session`` / ``-process``, else the configured defaults
        (the session falls back to the one Claude Code names in ``metadata.user_id``)."""
        c = self.config

        def value(name: bytes) -> str | None:
            raw = header(headers, name)
            return raw.strip()[:_MAX_ATTRIBUTION] or None if raw is not None else None

        return Attribution(
            entity_id=value(b"x-memtap-entity") or c.entity_id,
            session_id=value(b"x-memtap-session") or _session_from_body(body) or c.session_id,
            process_id=value(b"x-memtap-process") or c.process_id,
        )

    async def _intercept(
        self, request: Request, r: Route, protocol: WireProtocol, body: bytes, url: str
    ) -> Response | StreamRelay:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):  # not ours to judge: the upstream answers it
            return await self._forward(request, url, body, identity=False)
        self.stats.intercepted += 1
        raw_headers = request.scope["headers"]
        call: Call | None = None
        sent = body
        try:
            attribution = self.attribution(raw_headers, parsed)
            view = protocol.read_request(parsed)
            agent = self.agent(r, view.system)
            command = parse_command(view)
            if command is not None:
                return await self._command(command, attribution, protocol, agent, parsed)
            call = Call(self.memory.tap, protocol, attribution, None)
            call.span.set_attribute("memtap.agent", agent)
            # Inline: injectors must be fast (hookspec contract); a thread hop would cost
            # more than the work (and its GIL hand-offs add milliseconds under load).
            prepared = call.prepare(parsed)
            if prepared is not parsed:
                sent = dump_body(prepared)
        except Exception:
            self.stats.fail_open += 1
            log.exception("memtap failed on a %s request; forwarding it unchanged", protocol.name)
            sent = body
        return await self._forward(request, url, sent, identity=True, call=call, protocol=protocol)

    def agent(self, r: Route, system: str | None) -> str:
        """The agent of a request: its URL prefix, else its system prompt's fingerprint,
        else ``generic``."""
        profile = detect_profile(self.profiles, system, name=r.agent)
        return profile.name if profile is not None else r.agent or "generic"

    async def _command(
        self,
        command: Command,
        attribution: Attribution,
        protocol: WireProtocol,
        agent: str,
        body: dict[str, Any],
    ) -> Response:
        self.stats.commands += 1
        ctx = CommandContext(self.memory, attribution, protocol.name, agent)
        text = await anyio.to_thread.run_sync(run_command, command, ctx)
        data, content_type, _ = synth.answer(protocol.name, text, body)
        return Response(data, 200, media_type=content_type)

    async def _forward(
        self,
        request: Request,
        url: str,
        body: bytes,
        *,
        identity: bool,
        call: Call | None = None,
        protocol: WireProtocol | None = None,
    ) -> Response | StreamRelay:
        headers = upstream_request_headers(request.scope["headers"], identity=identity)
        upstream_request = self.client.build_request(request.method, url, headers=headers, content=body)
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            if call is not None:
                call.failed(exc)
            family = "anthropic" if protocol is not None and protocol.provider == "anthropic" else "openai"
            return self._error(
                family, 502, f"memtap proxy: upstream {url.split('?')[0]} unreachable ({type(exc).__name__})"
            )
        if call is None:  # passed through: streamed as is, whatever it is
            return StreamRelay(upstream, client_response_headers(upstream.headers.raw, keep_length=True))
        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamRelay(
                upstream,
                client_response_headers(upstream.headers.raw, keep_length=False),
                call=call,
                protocol=protocol,
                hide_usage=call.hide_usage_event,
            )
        try:
            data = b"".join([chunk async for chunk in upstream.aiter_raw()])
        except httpx.HTTPError as exc:
            call.failed(exc)
            return self._error("openai", 502, f"memtap proxy: upstream answer cut ({type(exc).__name__})")
        finally:
            await upstream.aclose()
        if 200 <= upstream.status_code < 300:
            call.succeeded(data, json_or_none)
        else:
            call.failed(UpstreamError(upstream.status_code))
        response = Response(data, upstream.status_code)
        response.raw_headers = [
            *client_response_headers(upstream.headers.raw, keep_length=False),
            (b"content-length", str(len(data)).encode()),
        ]
        return response

    # -- helpers ---------------------------------------------------------------------------

    def _error(self, family: str, status: int, message: str) -> Response:
        return Response(synth.error_body(family, status, message), status, media_type="application/json")

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


class UpstreamError(Exception):
    """The upstream answered with an error status (recorded on the call's span)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"upstream answered HTTP {status}")
        self.status = status
