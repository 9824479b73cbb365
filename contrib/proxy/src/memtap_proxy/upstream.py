"""The proxy's upstream client: pooled HTTP/1.1 keep-alive connections on asyncio
protocols, answers parsed by httptools (llhttp, the parser uvicorn uses).

Hand-written rather than httpx (which the proxy used before) because the proxy's added
latency had to drop below a millisecond: through httpx + httpcore (on anyio) each forwarded
request took two writes (head, then body), a readability ``poll`` of the reused connection
and dozens of ``getpid`` calls (anyio looks the event loop up, and on Python 3.11 every
lookup is a system call); with them a passed-through call cost 2.7 ms of proxy CPU on the
project's 2-core VM, against 0.5 ms now (see docs/benchmarks.md). This client does only
what a forwarding proxy needs, in one small module:

* the request body is already in memory: head and body go out in **one** write;
* the answer's status and headers are returned as soon as they arrive, the body is read
  as it arrives (``content-length``, ``chunked``, or until the connection closes), and the
  reader gets every byte received so far in one piece (:meth:`UpstreamResponse.next_chunk`);
* connections are kept alive and reused (idle at most ``keepalive_expiry`` seconds, as
  httpx does); a request that finds a reused connection closed before any byte of its
  answer is sent again once on a fresh one (the server closed an idle connection: it never
  saw the request);
* a connect timeout, a read timeout (no byte for that long), a cap on connections in use,
  and reading paused while a slow client leaves too much of the answer unread;
* ``https://`` upstreams through the standard library's TLS (system CAs plus certifi's);
* an outbound HTTP proxy when the environment names one (``HTTPS_PROXY``, ``HTTP_PROXY``,
  ``ALL_PROXY``, ``NO_PROXY``, read by the standard library's rules; loopback upstreams
  always go direct): ``https://`` upstreams through a ``CONNECT`` tunnel, ``http://``
  ones by absolute-form requests, credentials in the proxy URL sent as Basic
  ``Proxy-Authorization``.

Anything wrong with the upstream raises :class:`UpstreamError` (a subclass per kind).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import time
import urllib.request
from collections import defaultdict
from typing import cast
from urllib.parse import unquote, urlsplit

import attrs
import httptools

from memtap.sdk.server import is_loopback_name

#: Body bytes buffered for a reader that is behind before reading the socket pauses.
HIGH_WATER = 1024 * 1024
#: Bodies at least this large are written beside the head (``writelines``), not copied.
_COPY_LIMIT = 64 * 1024
_CONTENT_LENGTH_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})


class UpstreamError(Exception):
    """The upstream could not be reached, or broke off or garbled its answer."""


class UpstreamConnectError(UpstreamError):
    """No connection to the upstream could be made."""


class UpstreamReadError(UpstreamError):
    """The connection closed (or was reset) before the answer was complete."""


class UpstreamTimeout(UpstreamError):
    """The upstream sent nothing for the read timeout."""


class UpstreamProtocolError(UpstreamError):
    """The upstream's answer is not valid HTTP/1.1."""


class ReaderGone(UpstreamError):
    """The response was abandoned by its reader (:meth:`UpstreamResponse.abort`)."""


@attrs.frozen
class Origin:
    """Where connections go: scheme, host, port, and the ``Host`` header value."""

    scheme: str
    host: str
    port: int
    host_header: bytes

    @classmethod
    def parse(cls, url: str) -> Origin:
        """The origin of an absolute ``http://`` or ``https://`` URL."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        header = shown if port == default else f"{shown}:{port}"
        return cls(parts.scheme, host, port, header.encode("ascii"))


@attrs.frozen
class Egress:
    """How connections to an origin are made: directly (``proxy`` is ``None``), or through
    the forward proxy ``proxy``: by a ``CONNECT`` tunnel (``tunnel``, for ``https://``
    origins) or by absolute-form requests (``http://`` ones); ``auth`` is the
    ``Proxy-Authorization`` value to send, if any."""

    proxy: Origin | None = None
    tunnel: bool = False
    auth: bytes | None = None


DIRECT = Egress()


def egress_from_environment(origin: Origin) -> Egress:
    """The route the environment's proxy variables give ``origin`` (standard library rules:
    lower-case names first, ``NO_PROXY`` honoured); loopback origins always go direct.
    Raises ``ValueError`` for a proxy this client cannot use (only ``http://`` proxies)."""
    if is_loopback_name(origin.host):
        return DIRECT
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(origin.scheme) or proxies.get("all")
    shown = f"[{origin.host}]" if ":" in origin.host else origin.host
    # host:port, so that NO_PROXY entries with a port match too (the host alone is tried as well)
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not url or bypass(f"{shown}:{origin.port}", proxies):
        return DIRECT
    if "://" not in url:
        url = "http://" + url
    variable = f"{origin.scheme.upper()}_PROXY"
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80
    except ValueError:
        # urlsplit's message may quote part of the URL, credentials included: not repeated.
        raise ValueError(
            f"memtap proxy cannot read the outbound proxy URL in {variable} (a character in "
            f"the user name or password that should be %-encoded?)"
        ) from None
    if parts.scheme != "http" or not host:
        raise ValueError(
            f"memtap proxy can use only http:// outbound proxies, not the {parts.scheme}:// "
            f"proxy at {host}; point {variable} at an HTTP proxy or add {origin.host} to NO_PROXY"
        )
    auth = None
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = b"Basic " + base64.b64encode(user_pass.encode("utf-8"))
    proxy = Origin.parse(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")
    return Egress(proxy, tunnel=origin.scheme == "https", auth=auth)


def default_ssl_context() -> ssl.SSLContext:
    """A verifying TLS context: the system's CAs, plus certifi's when it is installed."""
    context = ssl.create_default_context()
    with contextlib.suppress(ImportError, OSError):
        import certifi

        context.load_verify_locations(certifi.where())
    return context


class UpstreamResponse:
    """One upstream answer: :attr:`status` and :attr:`headers` (raw, as received) are set
    when :meth:`UpstreamPool.request` returns; the body is read with :meth:`next_chunk` or
    :meth:`read`. Always :meth:`close` it (the connection goes back to the pool only when
    the answer was complete)."""

    __slots__ = ("_chunks", "_closed", "_conn", "_error", "complete", "headers", "received", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        #: Whether the whole body has been received.
        self.complete = False
        #: Whether any byte of the answer has arrived.
        self.received = False
        self._error: UpstreamError | None = None
        self._closed = False

    @property
    def done(self) -> bool:
        """Whether the body is complete and every byte of it has been read."""
        return self.complete and not self._chunks and self._error is None

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lower-case), or ``None``."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    async def next_chunk(self) -> bytes:
        """All body bytes received since the last call, waiting for some when there are
        none; ``b""`` once the body is complete. Raises :class:`UpstreamError` when the
        answer was cut."""
        while True:
            chunks = self._chunks
            if chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._conn.drained()
                return data
            if self._error is not None:
                raise self._error
            if self.complete:
                return b""
            await self._conn.wait()

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    def abort(self, error: UpstreamError) -> None:
        """Stop the answer: a pending or later read raises ``error``."""
        if not self.complete and self._error is None:
            self._error = error
            self._conn.wake()

    def close(self) -> None:
        """Done with the answer: its connection goes back to the pool if the answer was
        complete and the upstream keeps it alive, else it is closed."""
        if self._closed:
            return
        self._closed = True
        self._conn.finished(self)


class _Connection(asyncio.Protocol):
    """One upstream connection; answers are parsed as they arrive."""

    def __init__(self, pool: UpstreamPool, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.origin = origin
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.response: UpstreamResponse | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.reused = False
        self.keep_alive = False
        self.idle_since = 0.0
        self._paused = False
        self._buffered = 0
        self._head_only = False
        self._informational = False
        self._until_close = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        response, parser = self.response, self.parser
        if response is None or parser is None or response.complete:
            self._close()  # bytes nobody asked for: this connection can't be trusted
            return
        response.received = True
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamProtocolError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"invalid HTTP answer from the upstream ({exc})"))
        self.wake()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        response = self.response
        if response is not None and not response.complete and response._error is None:
            if response.status and self._until_close and exc is None:
                response.complete = True  # a body delimited by the end of the connection
            else:
                detail = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
                response._error = UpstreamReadError(
                    "the upstream closed the connection before its answer was complete" + detail
                )
        self.wake()

    # -- httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        assert self.response is not None
        if self.response.complete:
            raise UpstreamProtocolError("the upstream sent more than one answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.response is not None
        self.response.headers.append((name, value))

    def on_headers_complete(self) -> None:
        response, parser = self.response, self.parser
        assert response is not None and parser is not None
        status = parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # e.g. 100 Continue: the real answer follows
            response.headers = []
            return
        response.status = status
        self._until_close = not any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in response.headers
        )
        if self._head_only:
            response.complete = True  # an answer to HEAD has no body, whatever it declares
            self.keep_alive = False  # and its parser would wait for one: don't reuse

    def on_body(self, body: bytes) -> None:
        response = self.response
        assert response is not None
        response._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        response, parser = self.response, self.parser
        assert response is not None and parser is not None
        if not self._head_only:
            self.keep_alive = parser.should_keep_alive()
        response.complete = True

    # -- used by the pool and the response -------------------------------------------------------

    def send(self, head: bytes, body: bytes, head_only: bool) -> UpstreamResponse:
        """Write one request (one write) and start reading its answer."""
        assert self.transport is not None
        response = UpstreamResponse(self)
        self.response = response
        self.parser = httptools.HttpResponseParser(self)
        self._head_only = head_only
        self._informational = False
        self._buffered = 0
        self.keep_alive = False
        if self.closed or self.transport.is_closing():
            response._error = UpstreamReadError("the upstream connection was already closed")
            return response
        if len(body) < _COPY_LIMIT:
            self.transport.write(head + body)
        else:
            self.transport.writelines([head, body])
        return response

    async def head(self, response: UpstreamResponse) -> UpstreamResponse:
        """Wait until ``response``'s status and headers have arrived."""
        while not response.status:
            if response._error is not None:
                raise response._error
            await self.wait()
        return response

    async def wait(self) -> None:
        """Wait for more of the current answer (bytes, its end, or an error), at most the
        read timeout."""
        loop = self.loop  # (asyncio.get_running_loop() makes a getpid() syscall on 3.11)
        waiter: asyncio.Future[None] = loop.create_future()
        self.waiter = waiter
        timer = loop.call_later(self.pool.read_timeout, self._timed_out)
        try:
            await waiter
        finally:
            timer.cancel()
            self.waiter = None

    def wake(self) -> None:
        """Wake the reader waiting in :meth:`wait`."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def drained(self) -> None:
        """The reader took every buffered body byte: read the socket again if paused."""
        self._buffered = 0
        if self._paused:
            self._paused = False
            if self.transport is not None and not self.closed:
                self.transport.resume_reading()

    def finished(self, response: UpstreamResponse) -> None:
        """``response`` was closed by its reader: back to the pool if reusable."""
        if (
            response is self.response
            and response.complete
            and response._error is None
            and self.keep_alive
            and not self.closed
        ):
            self.response = self.parser = None
            self.drained()
            self.pool._release(self)
        else:
            self.discard()
            self.pool._release(None)

    def discard(self) -> None:
        """Close the connection, whatever it was doing."""
        self.response = self.parser = None
        self._close()

    def _timed_out(self) -> None:
        response = self.response
        if response is not None and response._error is None and not response.complete:
            response._error = UpstreamTimeout(f"the upstream sent nothing for {self.pool.read_timeout:g} s")
        self.wake()
        self._close()

    def _fail(self, error: UpstreamError) -> None:
        response = self.response
        if response is not None and response._error is None and not response.complete:
            response._error = error
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


@attrs.define
class UpstreamPool:
    """Pooled keep-alive connections to any number of upstreams.

    ``max_connections`` caps the connections in use at once (a request beyond it waits for
    one, at most ``read_timeout``); at most ``max_idle`` idle connections are kept per
    origin, each for at most ``keepalive_expiry`` seconds.
    """

    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    max_connections: int = 256
    max_idle: int = 64
    keepalive_expiry: float = 5.0
    ssl_context: ssl.SSLContext | None = None
    #: Read the outbound proxy from the environment (:func:`egress_from_environment`).
    trust_env: bool = True
    _routes: dict[Origin, Egress] = attrs.field(init=False, factory=dict)
    _idle: defaultdict[Origin, list[_Connection]] = attrs.field(init=False, factory=lambda: defaultdict(list))
    _origins: dict[str, Origin] = attrs.field(init=False, factory=dict)
    _slots: asyncio.Semaphore | None = attrs.field(init=False, default=None)

    async def request(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send one request; returns once the answer's head has arrived.

        ``url`` is absolute; ``headers`` must not include ``Host`` or ``Content-Length``
        (both are set here) nor hop-by-hop headers.
        """
        origin, target = self._split(url)
        route = self._route(origin)
        verb = method.encode("ascii")
        if route.proxy is not None and not route.tunnel:
            target = b"http://" + origin.host_header + target  # absolute-form, to the proxy
        lines = [verb, b" ", target, b" HTTP/1.1\r\nhost: ", origin.host_header, b"\r\n"]
        if route.auth is not None and not route.tunnel:
            lines += (b"proxy-authorization: ", route.auth, b"\r\n")
        for name, value in headers:
            lines += (name, b": ", value, b"\r\n")
        if body or verb in _CONTENT_LENGTH_METHODS:
            lines.append(b"content-length: %d\r\n" % len(body))
        lines.append(b"\r\n")
        head = b"".join(lines)
        head_only = verb == b"HEAD"
        await self._take_slot()
        conn = self._idle_connection(origin)
        try:
            if conn is not None:
                response = conn.send(head, body, head_only)
                try:
                    return await conn.head(response)
                except UpstreamReadError:
                    if response.received:
                        raise
                    # The server closed this idle connection as we wrote: it never read the
                    # request. Send it once more on a fresh connection.
                    conn.discard()
                    conn = None
            conn = await self._connect(origin)
            return await conn.head(conn.send(head, body, head_only))
        except BaseException:
            if conn is not None:
                conn.discard()
            self._release(None)
            raise

    async def aclose(self) -> None:
        """Close every idle connection (connections in use close with their answers)."""
        for conns in self._idle.values():
            for conn in conns:
                conn.discard()
        self._idle.clear()

    # -- internals ----------------------------------------------------------------------------

    def _split(self, url: str) -> tuple[Origin, bytes]:
        scheme_end = url.find("://")
        slash = url.find("/", scheme_end + 3)
        base, target = (url, "/") if slash < 0 else (url[:slash], url[slash:])
        origin = self._origins.get(base)
        if origin is None:
            origin = self._origins[base] = Origin.parse(base)
        return origin, target.encode("latin-1")

    def _route(self, origin: Origin) -> Egress:
        route = self._routes.get(origin)
        if route is None:
            try:
                route = egress_from_environment(origin) if self.trust_env else DIRECT
            except ValueError as exc:
                raise UpstreamConnectError(str(exc)) from None
            self._routes[origin] = route
        return route

    async def _take_slot(self) -> None:
        slots = self._slots
        if slots is None:
            slots = self._slots = asyncio.Semaphore(self.max_connections)
        if not slots.locked():
            await slots.acquire()  # returns at once
            return
        try:
            await asyncio.wait_for(slots.acquire(), self.read_timeout)
        except asyncio.TimeoutError:
            raise UpstreamTimeout("no upstream connection became free in time") from None

    def _release(self, conn: _Connection | None) -> None:
        """A request is done with its connection (``None``: the connection was closed)."""
        if conn is not None:
            conn.idle_since = time.monotonic()
            conn.reused = True
            idle = self._idle[conn.origin]
            if len(idle) < self.max_idle:
                idle.append(conn)
            else:
                conn.discard()
        if self._slots is not None:
            self._slots.release()

    def _idle_connection(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_expiry:
                return conn
            conn.discard()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        route = self._route(origin)
        where = route.proxy or origin
        try:
            return await asyncio.wait_for(self._open(origin, route), self.connect_timeout)
        except asyncio.TimeoutError:
            via = f" through the proxy {where.host}:{where.port}" if route.proxy else ""
            raise UpstreamConnectError(
                f"connecting to {origin.host}:{origin.port}{via} timed out after {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
            raise UpstreamConnectError(f"cannot connect to {where.host}:{where.port}: {exc}") from exc

    async def _open(self, origin: Origin, route: Egress) -> _Connection:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if origin.scheme == "https":
            if self.ssl_context is None:
                self.ssl_context = default_ssl_context()
            context = self.ssl_context
        if route.proxy is None or not route.tunnel:
            # Direct, or to an HTTP proxy that takes absolute-form requests.
            where = route.proxy or origin
            _, conn = await loop.create_connection(
                lambda: _Connection(self, origin, loop),
                where.host,
                where.port,
                ssl=context if route.proxy is None else None,
                server_hostname=origin.host if context is not None and route.proxy is None else None,
            )
            return conn
        raw, setup = await loop.create_connection(_TunnelSetup, route.proxy.host, route.proxy.port)
        host = f"[{origin.host}]" if ":" in origin.host else origin.host
        authority = f"{host}:{origin.port}".encode("ascii")
        lines = [b"CONNECT ", authority, b" HTTP/1.1\r\nhost: ", authority, b"\r\n"]
        if route.auth is not None:
            lines += (b"proxy-authorization: ", route.auth, b"\r\n")
        raw.write(b"".join([*lines, b"\r\n"]))
        try:
            status = await setup.status
        except BaseException:
            raw.close()
            raise
        if status != 200:
            raw.close()
            raise UpstreamConnectError(
                f"the proxy {route.proxy.host}:{route.proxy.port} refused to connect to "
                f"{origin.host}:{origin.port} (HTTP {status})"
            )
        conn = _Connection(self, origin, loop)
        assert context is not None  # a tunnel is made for https:// origins only
        try:
            tls = await loop.start_tls(raw, conn, context, server_hostname=origin.host)
        except BaseException:
            raw.close()
            raise
        assert tls is not None
        conn.connection_made(tls)
        return conn


class _TunnelSetup(asyncio.Protocol):
    """Reads the proxy's answer to ``CONNECT`` (its status) before TLS starts in the tunnel."""

    def __init__(self) -> None:
        self.status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        if self.status.done():
            return
        self._buffer += data
        if b"\r\n\r\n" in self._buffer:
            line = self._buffer.split(b"\r\n", 1)[0].split()
            if len(line) >= 2 and line[0].startswith(b"HTTP/1.") and line[1].isdigit():
                self.status.set_result(int(line[1]))
            else:
                self.status.set_exception(UpstreamProtocolError("the proxy's answer to CONNECT is not HTTP"))
        elif len(self._buffer) > 65536:
            self.status.set_exception(UpstreamProtocolError("the proxy's answer to CONNECT is too long"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.status.done():
            self.status.set_exception(UpstreamConnectError("the proxy closed the connection during CONNECT"))
