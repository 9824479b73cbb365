"""Bounds on what a client connection may hold: time to send a request's head and body,
time left idle, the size of a head, and how many connections are open at once.

uvicorn's HTTP/1.1 protocols bound none of these except the keep-alive pause after a
response (and any byte received cancels that timer): a connection that sends nothing, a
head sent a byte at a time, or a body that stops half-way is held open for ever. So
:class:`BoundedHttpProtocol` gives each connection a deadline, moved as a request moves on,
and a periodic check (every quarter of the shortest timeout, 50 ms to 1 s) closes it once
the deadline has passed. A request's path only writes two attributes: a loop timer per
transition would cost ~6 µs each under uvloop (a libuv handle per ``call_later``).

* no request under way (after connecting, after each answer): closed after ``idle_timeout``;
* from a request's first byte: its head must be complete within ``header_timeout`` (a 408
  otherwise), and stay under :data:`MAX_HEAD` bytes (a 431);
* from the head's end: the body must be complete within ``body_timeout`` (a 408);
* while the application answers, no deadline: the upstream client's own timeouts bound it,
  and an SSE answer may rightly run for minutes.

At most ``max_clients`` connections are open: a new connection over the bound closes the
connection that has waited longest without a request under way (an idle keep-alive
connection, or one still sending its head), else it is answered 503 and closed.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import attrs

from .coalesce import HeadHoldingHttpToolsProtocol

#: Largest request head (request line and headers) accepted, in bytes.
MAX_HEAD = 64 * 1024

_IDLE, _HEAD, _BODY, _BUSY = range(4)


@attrs.frozen
class ClientLimits:
    """The bounds a :class:`BoundedHttpProtocol` enforces (seconds, connections, bytes)."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0
    idle_timeout: float = 30.0
    max_clients: int = 256
    max_head: int = MAX_HEAD

    @property
    def check_interval(self) -> float:
        """How often a connection's deadline is checked (seconds): how late past its
        timeout a connection may be closed."""
        shortest = min(self.header_timeout, self.body_timeout, self.idle_timeout)
        return min(1.0, max(0.05, shortest / 4))


def _answer(status: int, reason: str, message: str) -> bytes:
    """A whole plain-text response that closes the connection."""
    body = message.encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class BoundedHttpProtocol(HeadHoldingHttpToolsProtocol):
    """uvicorn's httptools protocol (with held heads) that enforces :attr:`limits`.

    Use :func:`bounded_protocol` to make the class for given limits.
    """

    limits: ClassVar[ClientLimits] = ClientLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._check_timer: asyncio.TimerHandle | None = None
        self._phase = _IDLE
        self._since = 0.0
        self._deadline: float | None = None
        self._head_size = 0
        self._head_too_large = False

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Set up as uvicorn does, then start the idle timer, or make room (or refuse)
        when ``max_clients`` connections are open."""
        super().connection_made(transport)
        self._become_idle()
        self._check_timer = self.loop.call_later(self.limits.check_interval, self._check)
        if len(self.connections) > self.limits.max_clients and not self._close_longest_idle():
            self._refuse(
                503,
                "Service Unavailable",
                f"memtap proxy: {self.limits.max_clients} connections are busy (--max-clients); retry",
            )

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the checks, then clean up as uvicorn does."""
        if self._check_timer is not None:
            self._check_timer.cancel()
            self._check_timer = None
        super().connection_lost(exc)

    # -- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        """A request's first byte: its head must now arrive within ``header_timeout``."""
        super().on_message_begin()
        self._head_size = 0
        self._enter(_HEAD, self.limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        """Count the request target towards :data:`MAX_HEAD`."""
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count a header towards :data:`MAX_HEAD`."""
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is in: the body must now arrive within ``body_timeout``."""
        self._enter(_BODY, self.limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The body is in: no timer while the application answers."""
        super().on_message_complete()
        if self.cycle is not None and self.cycle.response_complete:  # answered before the body ended
            self._become_idle()
        else:
            self._phase = _BUSY
            self._deadline = None

    def on_response_complete(self) -> None:
        """An answer is out: idle again, unless a pipelined request starts now."""
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self._phase == _BUSY and not pipelined:
            self._become_idle()

    def send_400_response(self, msg: str) -> None:
        """A parse error; a 431 instead when the head was too large."""
        if self._head_too_large:
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"memtap proxy: request head larger than {self.limits.max_head} bytes",
            )
        else:
            super().send_400_response(msg)

    # -- deadlines --------------------------------------------------------------------------

    def _enter(self, phase: int, timeout: float) -> None:
        self._phase = phase
        self._since = now = self.loop.time()
        self._deadline = now + timeout

    def _become_idle(self) -> None:
        self._enter(_IDLE, self.limits.idle_timeout)

    def _check(self) -> None:
        """The periodic check: act on a passed deadline, else check again later."""
        self._check_timer = None
        if self.transport.is_closing():
            return
        deadline = self._deadline
        if deadline is None or self.loop.time() < deadline:
            self._check_timer = self.loop.call_later(self.limits.check_interval, self._check)
        elif self._phase == _IDLE:
            self.transport.close()
        elif self._phase == _HEAD:
            self._refuse(
                408,
                "Request Timeout",
                f"memtap proxy: the request head did not arrive within {self.limits.header_timeout:g} s "
                f"(--header-timeout)",
            )
        elif self.cycle is not None and self.cycle.response_started:
            self.transport.close()  # answered already (a refusal): its body is not awaited
        else:
            self._refuse(
                408,
                "Request Timeout",
                f"memtap proxy: the request body did not arrive within {self.limits.body_timeout:g} s "
                f"(--body-timeout)",
            )

    # -- helpers ---------------------------------------------------------------------------

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.limits.max_head:
            self._head_too_large = True
            raise OverflowError("request head too large")  # the parser stops: send_400_response

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer ``status`` and close (the application, if running, sees a disconnect)."""
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.write(_answer(status, reason, message))
            self.transport.close()

    def _close_longest_idle(self) -> bool:
        """Close the connection waiting longest without a request under way (not this one)."""
        oldest: BoundedHttpProtocol | None = None
        for other in self.connections:
            if (
                other is not self
                and isinstance(other, BoundedHttpProtocol)
                and other._phase in (_IDLE, _HEAD)
                and not other.transport.is_closing()
                and (oldest is None or other._since < oldest._since)
            ):
                oldest = other
        if oldest is None:
            return False
        oldest.transport.close()
        return True


def bounded_protocol(limits: ClientLimits) -> type[BoundedHttpProtocol]:
    """A :class:`BoundedHttpProtocol` class enforcing ``limits`` (uvicorn builds the
    protocol from a class, one instance per connection)."""
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), {"limits": limits})
