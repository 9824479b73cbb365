"""A stream sent as one JSON array (Gemini's ``streamGenerateContent`` without
``alt=sse``), read by the relay as it reads SSE.

Splitting the array is the wire protocol's own (``new_array_stream()``: memtap-google's
:class:`~memtap_google.JSONArrayStream`); here each element becomes an event whose data is
its JSON text, fed to the call like an SSE event's, and the array's end a terminal event.
"""

from __future__ import annotations

from typing import Any, Protocol

from .sse import SSEEvent

#: The event that says the array has closed (the stream said everything).
END_OF_ARRAY = "memtap.end_of_array"


class ElementReader(Protocol):
    """What a wire protocol's ``new_array_stream()`` returns."""

    done: bool

    def feed(self, chunk: bytes) -> list[str]:
        """The elements ``chunk`` completes, as JSON texts."""

    def close(self) -> list[str]:
        """The elements still held at the end of the body."""


def array_reader(protocol: Any) -> ElementReader | None:
    """``protocol``'s reader of JSON-array streams, or ``None`` if it has none (the stream
    is then passed through)."""
    make = getattr(protocol, "new_array_stream", None)
    return make() if callable(make) else None


class ArrayEvents:
    """Feed a JSON-array stream's bytes, get its elements as data-only events (their
    ``raw`` is empty: the relay forwards the bytes as they came, never these)."""

    def __init__(self, reader: ElementReader) -> None:
        self.reader = reader
        self._ended = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events ``chunk`` completes."""
        return self._events(self.reader.feed(chunk))

    def close(self) -> list[SSEEvent]:
        """At the end of the body: what is still held."""
        return self._events(self.reader.close())

    def _events(self, texts: list[str]) -> list[SSEEvent]:
        events = [SSEEvent(raw=b"", data=text) for text in texts]
        if self.reader.done and not self._ended:
            self._ended = True
            events.append(SSEEvent(raw=b"", event=END_OF_ARRAY))
        return events
