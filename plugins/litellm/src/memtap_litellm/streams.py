"""Observing litellm streams (``CustomStreamWrapper``) without changing them.

The stream keeps its type: its class is swapped for a cached subclass whose ``__next__`` /
``__anext__`` report each chunk to the call before returning it, and whose ``close`` /
``aclose`` report an early end. ``for``/``async for`` get a generator over those (as
Stainless streams do), so a ``break`` is reported as soon as the loop drops it: litellm's
own background logging keeps the stream object alive for a while after the caller is done
with it. A stream read with ``next()`` and abandoned is reported when it is
garbage-collected (``weakref.finalize``). The call is finalised exactly once whatever
happens first: the end, an error, ``close``, a ``break``, or collection.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from memtap.tap import Call

log = logging.getLogger("memtap.litellm")

JsonFn = Callable[[Any], Mapping[str, Any] | None]


class StreamTap:
    """What a tapped stream reports to: one call, finalised once."""

    __slots__ = ("call", "finalizer", "reading", "to_json")

    def __init__(self, call: Call, to_json: JsonFn) -> None:
        self.call = call
        self.to_json = to_json
        self.finalizer: weakref.finalize[Any, Any] | None = None
        #: True while the stream's own ``__next__`` runs: litellm closes the stream itself
        #: when it ends or fails, which is not the caller abandoning it.
        self.reading = False

    def observe(self, chunk: Any) -> bool:
        """Record ``chunk``; whether the caller should see it (the usage-only chunk memtap
        asked for is hidden)."""
        try:
            self.call.stream_item(chunk)
            if self.call.hide_usage_event and self.call.protocol.is_hidden_usage_event(chunk):
                return False
        except Exception:
            log.exception("memtap could not observe a litellm stream chunk")
        return True

    def finish(self, error: BaseException | None = None, partial: bool = False) -> None:
        """The stream ended (or was closed, abandoned, or failed): capture it, once."""
        try:
            if self.finalizer is not None:
                self.finalizer.detach()
            self.call.stream_finished(self.to_json, error=error, partial=partial)
        except Exception:
            log.exception("memtap could not capture a litellm stream")


def tap_stream(stream: Any, call: Call, to_json: JsonFn) -> None:
    """Make ``stream`` report to ``call`` while passing its chunks on unchanged."""
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
    def __next__(self: Any) -> Any:
        tap: StreamTap = self._memtap_tap
        while True:
            tap.reading = True
            try:
                chunk = cls.__next__(self)
            except StopIteration:
                tap.finish()
                raise
            except BaseException as exc:
                tap.finish(error=exc)
                raise
            finally:
                tap.reading = False
            if tap.observe(chunk):
                return chunk

    async def __anext__(self: Any) -> Any:
        tap: StreamTap = self._memtap_tap
        while True:
            tap.reading = True
            try:
                chunk = await cls.__anext__(self)
            except StopAsyncIteration:
                tap.finish()
                raise
            except BaseException as exc:
                tap.finish(error=exc)
                raise
            finally:
                tap.reading = False
            if tap.observe(chunk):
                return chunk

    def __iter__(self: Any) -> Iterator[Any]:
        done = False
        try:
            while True:
                try:
                    chunk = self.__next__()
                except StopIteration:
                    done = True
                    return
                yield chunk
        finally:
            if not done:
                self._memtap_tap.finish(partial=True)

    async def __aiter__(self: Any) -> AsyncIterator[Any]:
        done = False
        try:
            while True:
                try:
                    chunk = await self.__anext__()
                except StopAsyncIteration:
                    done = True
                    return
                yield chunk
        finally:
            if not done:
                self._memtap_tap.finish(partial=True)

    def close(self: Any) -> Any:
        tap: StreamTap = self._memtap_tap
        if not tap.reading:
            tap.finish(partial=True)
        return cls.close(self)

    async def aclose(self: Any) -> Any:
        tap: StreamTap = self._memtap_tap
        if not tap.reading:
            tap.finish(partial=True)
        return await cls.aclose(self)

    namespace: dict[str, Any] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    if hasattr(cls, "__next__"):
        namespace["__next__"] = __next__
        namespace["__iter__"] = __iter__
    if hasattr(cls, "__anext__"):
        namespace["__anext__"] = __anext__
        namespace["__aiter__"] = __aiter__
    if hasattr(cls, "close"):
        namespace["close"] = close
    if hasattr(cls, "aclose"):
        namespace["aclose"] = aclose
    return type(cls.__name__, (cls,), namespace)
