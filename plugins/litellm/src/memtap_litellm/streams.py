"""Observing litellm streams (``CustomStreamWrapper``) without changing them.

The stream keeps its type: its class is swapped for a cached subclass whose ``__next__`` /
``__anext__`` report each chunk to the call before returning it, and whose ``close`` /
``aclose`` report an early end. ``for``/``async for`` get a generator over those (as
Stainless streams do), so a ``break`` is reported as soon as the loop drops it: litellm's
own background logging keeps the stream object alive for a while after the caller is done
with it. A stream read with ``next()`` and abandoned is reported when it is
garbage-collected (:mod:`memtap.adapters.streamtap`). The call is finalised exactly once whatever
happens first: the end, an error, ``close``, a ``break``, or collection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from memtap.sdk import Call, JsonFn, StreamTap, early_end_subclass, retype


def tap_stream(stream: Any, call: Call, to_json: JsonFn) -> None:
    """Make ``stream`` report to ``call`` while passing its chunks on unchanged."""
    retype(stream, StreamTap(call, to_json), _make_tapped_class)


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
            shown = tap.observe(chunk)
            if shown is not None:
                return shown

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
            shown = tap.observe(chunk)
            if shown is not None:
                return shown

    def chunks(self: Any) -> Iterator[Any]:
        while True:
            try:
                chunk = self.__next__()
            except StopIteration:
                return
            yield chunk

    async def achunks(self: Any) -> AsyncIterator[Any]:
        while True:
            try:
                chunk = await self.__anext__()
            except StopAsyncIteration:
                return
            yield chunk

    sync, is_async = hasattr(cls, "__next__"), hasattr(cls, "__anext__")
    methods: dict[str, Any] = {}
    if sync:
        methods["__next__"] = __next__
    if is_async:
        methods["__anext__"] = __anext__
    return early_end_subclass(
        cls, items=chunks if sync else None, aitems=achunks if is_async else None, methods=methods
    )
