"""Observing an SDK's stream object without changing what the app sees.

A provider adapter whose SDK returns its own stream class (botocore's ``EventStream``,
litellm's ``CustomStreamWrapper``...) taps it by swapping the object's class for a cached
subclass of it (:func:`retype`) whose iteration reports each item to a :class:`StreamTap`.
The stream keeps its type for ``isinstance`` and its every attribute; what the subclass
overrides is the adapter's (:func:`subclass_of` names it like the original). The tap
finalises the call exactly once, whatever comes first: the end, an error, an early
``close``/``break``, or the stream being garbage-collected unread.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .tap import Call

log = logging.getLogger("memtap.streams")

#: How an item of the stream becomes JSON for the accumulator (``None``: not an event).
JsonFn = Callable[[Any], Mapping[str, Any] | None]


class StreamTap:
    """What a tapped stream reports to: one call, finalised once. ``what`` names the
    stream in log messages."""

    __slots__ = ("call", "finalizer", "reading", "to_json", "what")

    def __init__(self, call: Call, to_json: JsonFn, what: str = "stream") -> None:
        self.call = call
        self.to_json = to_json
        self.what = what
        self.finalizer: weakref.finalize[Any, Any] | None = None
        #: True while the stream's own next-item method runs (a stream that closes itself
        #: when it ends or fails is not being abandoned by the caller).
        self.reading = False

    def observe(self, item: Any) -> bool:
        """Record ``item``; whether the caller should see it (the usage-only event memtap
        asked for is hidden)."""
        try:
            self.call.stream_item(item)
            if self.call.hide_usage_event and self.call.protocol.is_hidden_usage_event(item):
                return False
        except Exception:
            log.exception("memtap could not observe an item of a %s", self.what)
        return True

    def finish(self, error: BaseException | None = None, partial: bool = False) -> None:
        """The stream ended, was closed or abandoned, or failed: capture it (the call keeps
        only the first report)."""
        try:
            if self.finalizer is not None:
                self.finalizer.detach()
            self.call.stream_finished(self.to_json, error=error, partial=partial)
        except Exception:
            log.exception("memtap could not capture a %s", self.what)


_SUBCLASSES: dict[tuple[type, Callable[[type], type]], type] = {}


def retype(stream: Any, tap: StreamTap, make_class: Callable[[Any], type]) -> None:
    """Make ``stream`` report to ``tap``: its class becomes ``make_class(type(stream))``
    (made once per class and maker), whose methods find the tap as ``self._memtap_tap``;
    a stream collected before its end is reported as partial."""
    key = (type(stream), make_class)
    cls = _SUBCLASSES.get(key)
    if cls is None:
        cls = _SUBCLASSES[key] = make_class(type(stream))
    stream._memtap_tap = tap
    stream.__class__ = cls
    finalizer = weakref.finalize(stream, tap.finish, None, True)
    finalizer.atexit = False
    tap.finalizer = finalizer


def subclass_of(cls: Any, methods: Mapping[str, Any]) -> type:
    """A subclass of ``cls`` with ``methods``, named, documented and placed like ``cls``
    (so that reprs, tracebacks and ``isinstance`` look the same to the app)."""
    namespace = {
        **methods,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    return type(cls.__name__, (cls,), namespace)
