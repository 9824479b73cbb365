"""A loopback TCP forwarder whose network faults a test switches on and off: what a storage
backend (or anything else talking TCP) is tested against to show that a frozen network
never hangs a call.

It listens on 127.0.0.1 and forwards every connection to ``target_host:target_port`` (a
database server, say)::

    with TcpForwarder(5432) as fwd:
        store = MyStore(f"mydb://127.0.0.1:{fwd.port}/test")
        with fwd.fault("frozen"):
            ...  # calls must still return in time

A fault is a real network fault, seen by the client's socket exactly as it would be in
production:

- ``freeze()``: bytes stop flowing both ways; connections stay open (the kernel still
  acknowledges what the client sends) and new connections are accepted, then frozen too —
  a hung server, a stalled middlebox or a paused VM. ``freeze("down")`` lets requests
  through but holds every answer (a query frozen after it reached the server).
- ``slow(seconds)``: every chunk is held that long before it is passed on.
- ``reset()``: every open connection is reset (RST), and so is each new one.
- ``refuse()``: the listening socket is closed (connections are refused) and open ones reset.
- ``heal()``: back to forwarding; held bytes flow on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, Literal, TypeVar

Direction = Literal["both", "down"]
T = TypeVar("T")


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset instead of a FIN (SO_LINGER with a zero timeout)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class TcpForwarder:
    """The forwarder; use as a context manager. :attr:`port` is where clients connect."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.frozen: Direction | None = None
        self.delay = 0.0
        self.resetting = False
        self.connections = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-forwarder", daemon=True)
        self._thread.start()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.port = self._run(self._listen())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> int:
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self._server = server
        port: int = server.sockets[0].getsockname()[1]
        return port

    # -- faults ---------------------------------------------------------------------------

    def freeze(self, direction: Direction = "both") -> None:
        """Stop forwarding bytes (``"down"``: only the server's answers), keep connections."""
        self.frozen = direction

    def slow(self, seconds: float) -> None:
        """Hold every chunk ``seconds`` before passing it on."""
        self.delay = seconds

    def reset(self) -> None:
        """Reset every open connection, and each new one until :meth:`heal`."""
        self.resetting = True
        self._run(self._reset_all())

    def refuse(self) -> None:
        """Stop listening (connections are refused) and reset the open ones."""
        self._run(self._close_listener())
        self.reset()

    def heal(self) -> None:
        """Forward normally again (listening again after :meth:`refuse`)."""
        self.frozen = None
        self.delay = 0.0
        self.resetting = False
        if self._server is None:
            self._run(self._listen())

    @contextlib.contextmanager
    def fault(self, kind: str) -> Iterator[None]:
        """Apply the fault named ``kind`` (``refused``, ``frozen``, ``frozen_mid_query``,
        ``slow``, ``reset``) for the ``with`` block, then heal."""
        apply = {
            "refused": self.refuse,
            "frozen": self.freeze,
            "frozen_mid_query": lambda: self.freeze("down"),
            "slow": lambda: self.slow(2.0),
            "reset": self.reset,
        }[kind]
        apply()
        try:
            yield
        finally:
            self.heal()

    # -- plumbing -------------------------------------------------------------------------

    async def _close_listener(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _reset_all(self) -> None:
        for client, upstream in list(self._pairs):
            _rst(client)
            _rst(upstream)
        self._pairs.clear()

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.resetting:
            _rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _rst(writer)
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._pipe(reader, up_writer, "up"), self._pipe(up_reader, writer, "down"))
        finally:
            self._pairs.discard(pair)
            for w in pair:
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                while self.frozen == "both" or (self.frozen == "down" and way == "down"):
                    await asyncio.sleep(0.01)
                if self.delay:
                    await asyncio.sleep(self.delay)
                if writer.is_closing():
                    return
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.write_eof()

    def close(self) -> None:
        """Heal, stop listening, reset what is open and stop the loop."""
        self.heal()
        with contextlib.suppress(Exception):
            self._run(self._close_listener())
            self._run(self._reset_all())
            self._run(self._cancel_tasks())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> TcpForwarder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
