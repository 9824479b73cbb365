"""Observing a streamed answer without changing what the app sees: one observer for every
provider adapter.

A :class:`StreamTap` stands for one streamed call. Each item the app gets passes through
:meth:`StreamTap.observe` (recorded for the call; the usage event memtap asked for hidden),
and the call is finalised once by :meth:`StreamTap.finish`, whatever comes first: the end,
an error, an early ``close``/``break``, or the stream being dropped. Both fail open.

How the items reach the tap depends on the SDK:

- an iterator the adapter can replace (a Stainless stream's ``_iterator``, a generator the
  SDK returns) is wrapped by :meth:`StreamTap.iterate` / :meth:`StreamTap.aiterate`;
- a stream object of the SDK's own class (botocore's ``EventStream``, litellm's
  ``CustomStreamWrapper``) keeps its type: :func:`retype` swaps its class for a cached
  subclass (:func:`subclass_of` names it like the original) whose methods report to the
  tap, found as ``self._memtap_tap``. ``isinstance`` checks and the stream's every
  attribute keep working.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

from memtap.request.tap import Call

log = logging.getLogger("memtap.streams")

#: How an item of the stream becomes JSON for the accumulator (``None``: not an event).
JsonFn = Callable[[Any], Mapping[str, Any] | None]

#: Given an item of a stream whose request memtap changed to ask for usage
#: (``Call.hide_usage_event``), the item as the app would have got it without the change,
#: or ``None`` to hide it.
EventFilter = Callable[[Any], Any]


class StreamTap:
    """What a streamed call's items and end are reported to.

    ``to_json`` turns an item into the event JSON the protocol's accumulator reads.
    ``event_filter`` shows an item as the app would have got it had memtap not asked for
    usage (it applies only then); without one, the items the protocol calls
    ``is_hidden_usage_event`` are hidden and the others shown as they are.
    """

    __slots__ = ("call", "done", "event_filter", "finalizer", "reading", "to_json")

    def __init__(self, call: Call, to_json: JsonFn, event_filter: EventFilter | None = None) -> None:
        self.call = call
        self.to_json = to_json
        self.event_filter = event_filter
        self.finalizer: weakref.finalize[Any, Any] | None = None
        #: True while the stream's own next-item method runs (a stream that closes itself
        #: when it ends or fails is not being abandoned by the caller).
        self.reading = False
        #: The call has been finalised (a stream's ``__del__`` need not report again).
        self.done = False

    def observe(self, item: Any) -> Any:
        """Record ``item``; return it as the caller sees it (``None``: hidden, the usage
        event memtap asked for). A failure is logged and the item shown unchanged."""
        call = self.call
        try:
            call.stream_item(item)
            if call.hide_usage_event:
                if self.event_filter is not None:
                    return self.event_filter(item)
                if call.protocol.is_hidden_usage_event(item):
                    return None
        except Exception:
            log.exception("memtap could not observe an item of a %s stream", call.protocol.name)
        return item

    def finish(self, error: BaseException | None = None, partial: bool = False) -> None:
        """The stream ended, was closed or abandoned (``partial``), or failed (``error``):
        capture it. Only the first report counts; a failure is logged."""
        if self.done:
            return
        self.done = True
        try:
            if self.finalizer is not None:
                self.finalizer.detach()
            self.call.stream_finished(self.to_json, error=error, partial=partial)
        except Exception:
            log.exception("memtap could not capture a %s stream", self.call.protocol.name)

    def iterate(self, source: Iterable[Any]) -> Iterator[Any]:
        """``source``'s items as the caller sees them, observed; the end, an error, or the
        caller closing early (``break``, ``close()``: partial) finishes the call."""
        try:
            for item in source:
                shown = self.observe(item)
                if shown is not None:
                    yield shown
        except GeneratorExit:
            self.finish(partial=True)
            close = getattr(source, "close", None)
            if close is not None:
                close()
            raise
        except BaseException as exc:
            self.finish(error=exc)
            raise
        self.finish()

    async def aiterate(self, source: AsyncIterable[Any]) -> AsyncIterator[Any]:
        """The async form of :meth:`iterate`."""
        try:
            async for item in source:
                shown = self.observe(item)
                if shown is not None:
                    yield shown
        except GeneratorExit:
            self.finish(partial=True)
            raise
        except BaseException as exc:
            self.finish(error=exc)
            raise
        self.finish()


_SUBCLASSES: dict[tuple[type, Callable[[type], type]], type] = {}


def retype(
    stream: Any, tap: StreamTap, make_class: Callable[[Any], type], *, finish_when_collected: bool = True
) -> None:
    """Make ``stream`` report to ``tap``: its class becomes ``make_class(type(stream))``
    (made once per class and maker), whose methods find the tap as ``self._memtap_tap``.
    With ``finish_when_collected``, a stream garbage-collected before its end is reported
    as partial (for streams whose methods cannot see the caller walk away)."""
    key = (type(stream), make_class)
    cls = _SUBCLASSES.get(key)
    if cls is None:
        cls = _SUBCLASSES[key] = make_class(type(stream))
    stream._memtap_tap = tap
    stream.__class__ = cls
    if finish_when_collected:
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


def early_end_subclass(
    cls: Any,
    *,
    items: Callable[[Any], Iterable[Any]] | None = None,
    aitems: Callable[[Any], AsyncIterable[Any]] | None = None,
    methods: Mapping[str, Any] | None = None,
) -> type:
    """A subclass of the stream class ``cls`` (:func:`subclass_of`; a ``make_class`` for
    :func:`retype`) that reports an early end as a partial answer at once, to
    ``self._memtap_tap``: its ``__iter__`` (given ``items``) and ``__aiter__`` (given
    ``aitems``) yield what ``items(self)`` / ``aitems(self)`` yield, and a loop that stops
    before their end (a ``break``, an error) finishes the call; its ``close`` and ``aclose``
    (those ``cls`` has, sync or async like them) finish it before closing, unless the stream
    closes itself from its own next-item method (:attr:`StreamTap.reading`). ``methods``
    adds the class's other methods (an observing ``__next__``...)."""
    namespace: dict[str, Any] = dict(methods or {})
    if items is not None:
        each = items

        def __iter__(self: Any) -> Iterator[Any]:
            done = False
            try:
                yield from each(self)
                done = True
            finally:
                if not done:
                    self._memtap_tap.finish(partial=True)

        namespace["__iter__"] = __iter__
    if aitems is not None:
        aeach = aitems

        async def __aiter__(self: Any) -> AsyncIterator[Any]:
            done = False
            try:
                async for item in aeach(self):
                    yield item
                done = True
            finally:
                if not done:
                    self._memtap_tap.finish(partial=True)

        namespace["__aiter__"] = __aiter__
    for name in ("close", "aclose"):
        original = getattr(cls, name, None)
        if original is not None:
            namespace[name] = _finishing_first(original)
    return subclass_of(cls, namespace)


def _finishing_first(original: Callable[..., Any]) -> Callable[..., Any]:
    """A stream's ``close``/``aclose`` that first reports the stream closed early."""
    if inspect.iscoroutinefunction(original):

        async def aclose(self: Any) -> Any:
            tap: StreamTap = self._memtap_tap
            if not tap.reading:
                tap.finish(partial=True)
            return await original(self)

        return aclose

    def close(self: Any) -> Any:
        tap: StreamTap = self._memtap_tap
        if not tap.reading:
            tap.finish(partial=True)
        return original(self)

    return close
