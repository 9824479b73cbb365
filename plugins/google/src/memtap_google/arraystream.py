"""Reading a ``streamGenerateContent`` answer sent without ``?alt=sse``: one JSON array
whose elements (the stream's chunks, each a ``GenerateContentResponse``) arrive in
whatever pieces the network delivers (the Gemini API writes ``[{...}\\r\\n,\\r\\n{...}]``).

:class:`JSONArrayStream` hands back each element's JSON text as soon as its last byte is
in, so a relay can feed it to the protocol's accumulator while the bytes go on unchanged.
It only scans for the structural bytes (quotes, backslashes in strings, brackets): the
elements are parsed later, off the request path.
"""

from __future__ import annotations

import re

#: Outside a string: what changes the depth or opens a string.
_STRUCTURE = re.compile(rb'["{}\[\]]')
#: Inside a string: its end, or an escape (whose next byte is never its end).
_IN_STRING = re.compile(rb'["\\]')
_OPEN = frozenset(b"{[")


class JSONArrayStream:
    """Feed the bytes of a streamed JSON array; get its complete elements' JSON texts.

    Elements are what stands at the array's top level (objects or arrays; scalars there
    are skipped). A body that is one object instead of an array (an error answer) comes
    back as one element. :attr:`done` is set once the top-level value has closed.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._scan = 0  # where scanning resumes in _buf
        self._depth = 0
        self._base: int | None = None  # the depth elements start at (1: inside the array)
        self._start = -1  # where the current element starts in _buf
        self._in_string = False
        self._escaped = False  # a backslash ended the last piece inside a string
        #: Whether the top-level value has closed (the stream said everything).
        self.done = False

    def feed(self, chunk: bytes) -> list[str]:
        """The elements completed by ``chunk``, as JSON texts (bytes of an unfinished
        element are kept)."""
        if self.done or not chunk:
            return []
        self._buf += chunk
        out = self._scan_buffer()
        if self._start < 0:  # between elements: nothing before here is needed again
            self._buf, self._scan = b"", 0
        elif self._start > 0:
            self._buf, self._scan = self._buf[self._start :], self._scan - self._start
            self._start = 0
        return out

    def close(self) -> list[str]:
        """At the end of the body: an element cut before its end is left out (what it
        holds is not valid JSON); the elements complete so far were returned by
        :meth:`feed`."""
        self._buf, self._scan, self._start = b"", 0, -1
        return []

    def _scan_buffer(self) -> list[str]:
        out: list[str] = []
        buf = self._buf
        pos = self._scan
        if self._escaped and pos < len(buf):
            pos += 1
            self._escaped = False
        while not self.done:
            if self._in_string:
                found = _IN_STRING.search(buf, pos)
                if found is None:
                    pos = len(buf)
                    break
                at = found.start()
                if buf[at] == 0x5C:  # a backslash: skip the byte it escapes
                    if at + 1 >= len(buf):
                        self._escaped = True
                        pos = len(buf)
                        break
                    pos = at + 2
                    continue
                self._in_string = False
                pos = at + 1
                continue
            found = _STRUCTURE.search(buf, pos)
            if found is None:
                pos = len(buf)
                break
            at = found.start()
            pos = at + 1
            byte = buf[at]
            if byte == 0x22:  # '"'
                self._in_string = True
            elif byte in _OPEN:
                if self._base is None:  # the top-level value: an array holds the elements
                    self._base = 1 if byte == 0x5B else 0
                if self._depth == self._base:
                    self._start = at
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == self._base and self._start >= 0:
                    out.append(buf[self._start : pos].decode("utf-8", "replace"))
                    self._start = -1
                if self._depth <= 0:
                    self.done = True
        self._scan = pos
        return out
