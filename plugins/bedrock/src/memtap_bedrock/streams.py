"""Observing botocore ``EventStream`` objects without changing them.

The stream keeps its type: its class is swapped for a cached subclass whose ``__iter__``
reports each parsed event to the call and whose ``close`` reports an early end. A ``for``
loop that breaks drops the generator, which reports a partial answer at once; a stream
never iterated is reported when it is garbage-collected. The call is finalised exactly
once, whatever comes first.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from memtap.tap import Call

log = logging.getLogger("memtap.bedrock")

JsonFn = Callable[[Any], Mapping[str, Any] | None]


class StreamTap:
    """What a tapped event stream reports to: one call, finalised once."""

    __slots__ = ("call", "finalizer", "to_json")

    def __init__(self, call: Call, to_json: JsonFn) -> None:
        self.call = call
        self.to_json = to_json
        self.finalizer: weakref.finalize[Any, Any] | None = None

    def observe(self, event: Any) -> None:
        """Record one event (read after the stream ends)."""
        try:
            self.call.stream_item(event)
        except Exception:
            log.exception("memtap could not observe a Bedrock stream event")

    def finish(self, error: BaseException | None = None, partial: bool = False) -> None:
        """The stream ended, was closed or abandoned, or failed: capture it, once."""
        try:
            if self.finalizer is not None:
                self.finalizer.detach()
            self.call.stream_finished(self.to_json, error=error, partial=partial)
        except Exception:
            log.exception("memtap could not capture a Bedrock stream")


def tap_event_stream(stream: Any, call: Call, to_json: JsonFn) -> None:
    """Make the ``EventStream`` ``stream`` report to ``call``, its events unchanged."""
    tap = StreamTap(call, to_json)
    stream._memtap_tap = tap
    stream.__class__ = _tapped_class(type(stream))
    finalizer = weakref.finalize(stream, tap.finish, None, True)
    finalizer.atexit = False
    tap.finalizer = finalizer


_TAPPED: dict[type, type] = {}


def _tapped_class(cls: type) -> type:
    found = _TAPPED.get(cls)
    if found is None:
        found = _TAPPED[cls] = _make_tapped_class(cls)
    return found


def _make_tapped_class(cls: Any) -> type:
    def __iter__(self: Any) -> Iterator[Any]:
        tap: StreamTap = self._memtap_tap
        done = False
        try:
            for event in cls.__iter__(self):
                tap.observe(event)
                yield event
            done = True
        except GeneratorExit:
            raise
        except BaseException as exc:
            tap.finish(error=exc)
            raise
        finally:
            tap.finish(partial=not done)

    def close(self: Any) -> Any:
        self._memtap_tap.finish(partial=True)
        return cls.close(self)

    namespace: dict[str, Any] = {
        "__iter__": __iter__,
        "close": close,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    return type(cls.__name__, (cls,), namespace)
