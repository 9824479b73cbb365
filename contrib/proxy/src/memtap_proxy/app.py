"""The proxy's ASGI application.

One request's path: check the token and the size limit, route it (agent prefix, protocol
family), answer a ``mem:`` command locally, or inject through the wire protocol's own
``inject`` (the same code as the in-process mode) and forward; relay the answer and capture
it on the side. Everything memtap does on the way fails open: an error forwards the
client's original bytes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import ssl
from collections.abc import Mapping
from typing import Any

import attrs

from memtap import Memory
from memtap.anchors import AgentProfile, detect_profile
from memtap.model import Attribution
from memtap.rejection import VALIDATION_STATUSES
from memtap.tap import Call
from memtap.wire import WireProtocol

from . import synth
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
from .commands import Command, CommandContext, parse_command, run_command
from .config import ProxyConfig
from .headers import MEMTAP_PREFIX, client_response_headers, header, upstream_request_headers
from .relay import StreamRelay, json_or_none
from .routing import UPSTREAM_FLAGS, Route, route, upstream_url
from .upstream import UpstreamError, UpstreamPool, UpstreamResponse

log = logging.getLogger("memtap.proxy")

#: Agents whose URL prefix (``/claude-code/v1/messages``) the proxy recognises.
DEFAULT_AGENTS = frozenset({"claude-code", "codex", "codebuddy", "generic"})
_MAX_ATTRIBUTION = 200


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
        # Calls finish after their answer is written: format them then (see Tap).
        memory.tap.format_in_caller = True
        # Requests are coming: load the embedder's model now, in the background.
        memory.longterm.warm_up()
        self.stats = ProxyStats()
        self.protocols: dict[str, WireProtocol] = {
            p.name: p for group in memory.pm.hook.memtap_wire_protocols() for p in group or ()
        }
        self.profiles: list[AgentProfile] = [
            p for group in memory.pm.hook.memtap_agent_profiles() for p in group or ()
        ]
        self.agents = DEFAULT_AGENTS | {p.name for p in self.profiles}
        #: Pooled HTTP/1.1 keep-alive connections to the upstreams.
        self.upstream = UpstreamPool(
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            max_connections=config.max_connections,
            ssl_context=ssl_context,
        )
        self._warned: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

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
        r = route(method, path, raw_headers, self.agents)
        token = self.config.token
        if token and not hmac.compare_digest(
            (header(raw_headers, b"x-memtap-token") or "").encode(), token.encode()
        ):
            return await self._error(
                send, r.family, 401, "memtap proxy: missing or wrong x-memtap-token header"
            )
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
        if base is None:
            flag, env = UPSTREAM_FLAGS[r.family]
            return await self._error(
                send,
                r.family,
                502,
                f"memtap proxy: no {r.family} upstream configured; start it with {flag} URL (or set {env})",
            )
        url = upstream_url(base, r.path, scope.get("query_string", b""))
        if r.protocol is not None and method == "POST":
            protocol = self.protocols.get(r.protocol)
            if protocol is not None:
                return await self._intercept(scope, receive, send, r, protocol, body, url)
            self._warn_once(r.protocol)
        await self._forward(scope, receive, send, url, body, identity=False)

    def attribution(self, headers: RawHeaders, body: Mapping[str, Any]) -> Attribution:
        """``x-memtap-entity`` / ``-session`` / ``-process``, else the configured defaults
        (the session falls back to the one Claude Code names in ``metadata.user_id``)."""
        c = self.config
        found: dict[bytes, str] = {}
        for name, raw in headers:  # one pass; the first of each header counts
            if name[:9].lower() == MEMTAP_PREFIX and name.lower() not in found:
                found[name.lower()] = raw.decode("latin-1").strip()[:_MAX_ATTRIBUTION]
        return Attribution(
            entity_id=found.get(b"x-memtap-entity") or c.entity_id,
            session_id=found.get(b"x-memtap-session") or _session_from_body(body) or c.session_id,
            process_id=found.get(b"x-memtap-process") or c.process_id,
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
    ) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):  # not ours to judge: the upstream answers it
            return await self._forward(scope, receive, send, url, body, identity=False)
        self.stats.intercepted += 1
        raw_headers = scope["headers"]
        call: Call | None = None
        sent = body
        try:
            attribution = self.attribution(raw_headers, parsed)
            view = protocol.read_request(parsed)
            agent = self.agent(r, view.system)
            command = parse_command(view)
            if command is not None:
                return await self._command(send, command, attribution, protocol, agent, parsed)
            call = Call(self.memory.tap, protocol, attribution, None, agent=r.agent)
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
        )

    def agent(self, r: Route, system: str | None) -> str:
        """The agent of a request: its URL prefix, else its system prompt's fingerprint,
        else ``generic``."""
        profile = detect_profile(self.profiles, system, name=r.agent)
        return profile.name if profile is not None else r.agent or "generic"

    async def _command(
        self,
        send: Send,
        command: Command,
        attribution: Attribution,
        protocol: WireProtocol,
        agent: str,
        body: dict[str, Any],
    ) -> None:
        self.stats.commands += 1
        ctx = CommandContext(self.memory, attribution, protocol.name, agent)
        text = await asyncio.to_thread(run_command, command, ctx)
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
    ) -> None:
        headers = upstream_request_headers(scope["headers"], identity=identity)
        family = "anthropic" if protocol is not None and protocol.provider == "anthropic" else "openai"
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
        if (upstream.header(b"content-type") or b"").startswith(b"text/event-stream"):
            relay = StreamRelay(
                upstream,
                client_response_headers(upstream.headers, keep_length=False),
                call=call,
                protocol=protocol,
                hide_usage=call.hide_usage_event,
            )
            return await relay(receive, send, self.loop())
        await self._relay_whole(send, upstream, call, family)

    async def _relay_whole(self, send: Send, upstream: UpstreamResponse, call: Call, family: str) -> None:
        """A non-streamed answer: read it whole, send it, then capture it."""
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
        await send_response(send, status, client_response_headers(upstream.headers, keep_length=False), data)
        # Captured once the answer's bytes are written (the server writes a body at once,
        # its head with it), before the loop reads anything else: off the answer's path,
        # yet in the history before the client's next request is read.
        _capture_whole(call, status, data)

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

    async def _error(self, send: Send, family: str, status: int, message: str) -> None:
        body = synth.error_body(family, status, message)
        await send_response(send, status, [content_type("application/json")], body)

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
