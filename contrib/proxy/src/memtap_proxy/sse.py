"""An incremental, byte-accounting Server-Sent Events parser.

The proxy forwards a stream's bytes as they arrive and reads its events on the side.
:class:`SSEParser` takes the bytes in whatever pieces the network delivers and returns
:class:`SSEEvent` segments: every byte fed comes back exactly once, in order, in the
``raw`` of some segment (so a segment can be forwarded or, for the one event memtap itself
asked for, dropped). Lines may end in CRLF, LF or CR, even split across reads; ``data:``
without a space, multi-line data, comments and an event cut by EOF are all handled.
"""

from __future__ import annotations

import re

import attrs

_LINE_END = re.compile(rb"\r\n|\r|\n")


@attrs.frozen
class SSEEvent:
    """One event (or a run of bytes that dispatches nothing, e.g. a comment block).

    ``raw`` is the exact bytes, including the blank line that ended the event; ``data`` is
    the joined ``data:`` lines (``None`` when there were none); ``event`` is the ``event:``
    field, if any.
    """

    raw: bytes
    data: str | None = None
    event: str | None = None


class SSEParser:
    """Feed bytes, get complete events; :meth:`close` at EOF returns the rest."""

    def __init__(self) -> None:
        self._buf = b""
        self._scan = 0  # where the next line starts in _buf
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk`` (bytes of an unfinished event are kept)."""
        self._buf += chunk
        return self._parse(final=False)

    def close(self) -> list[SSEEvent]:
        """At EOF: the events still buffered, the last one dispatched even without its
        blank line (lenient, so a stream cut before ``[DONE]`` is still read), and any
        leftover bytes as a data-less segment."""
        events = self._parse(final=True)
        if self._scan < len(self._buf):  # a last line without a line break
            self._line(self._buf[self._scan :])
            self._scan = len(self._buf)
        if self._buf:
            events.append(self._dispatch(len(self._buf)))
        return events

    @property
    def pending(self) -> int:
        """Bytes held back as part of an unfinished event."""
        return len(self._buf)

    def _parse(self, *, final: bool) -> list[SSEEvent]:
        if b"\r" not in self._buf:
            return self._parse_lf()
        events: list[SSEEvent] = []
        buf = self._buf
        while True:
            match = _LINE_END.search(buf, self._scan)
            if match is None:
                break
            end = match.end()
            if match.group() == b"\r" and end == len(buf) and not final:
                break  # a CR at the end of a read may be the first half of a CRLF
            line = buf[self._scan : match.start()]
            self._scan = end
            if line:
                self._line(line)
            else:
                events.append(self._dispatch(end))
                buf = self._buf
        return events

    def _parse_lf(self) -> list[SSEEvent]:
        """:meth:`_parse` of a buffer whose lines all end in LF (what servers send): an
        event's lines are cut at its blank line with ``bytes.find``, not one by one."""
        events: list[SSEEvent] = []
        while True:
            buf, scan = self._buf, self._scan
            if buf[scan : scan + 1] == b"\n":  # a blank line: the event ends
                events.append(self._dispatch(scan + 1))
                continue
            end = buf.find(b"\n\n", scan)
            if end < 0:  # the event goes on: read its complete lines, keep the rest
                last = buf.rfind(b"\n", scan)
                if last > scan:
                    for line in buf[scan:last].split(b"\n"):
                        self._line(line)
                    self._scan = last + 1
                return events
            for line in buf[scan:end].split(b"\n"):
                self._line(line)
            events.append(self._dispatch(end + 2))

    def _line(self, line: bytes) -> None:
        if line[:1] == b":":
            return  # a comment
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")

    def _dispatch(self, end: int) -> SSEEvent:
        raw, self._buf = self._buf[:end], self._buf[end:]
        self._scan = 0
        data = "\n".join(self._data) if self._data else None
        event = SSEEvent(raw=raw, data=data, event=self._event)
        self._data = []
        self._event = None
        return event
