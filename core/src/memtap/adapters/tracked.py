"""One wrapper for every SDK method memtap tracks, in the form of the method it wraps.

An adapter describes a tracked method with three functions, and :func:`tracked` does the
rest, identically for every provider:

- ``begin(args, kwargs)`` starts the :class:`~memtap.request.tap.Call` for one invocation
  (``tap.begin(protocol, fallback_body=...)``), or returns ``None`` for an invocation
  memtap does not track (another route, a nested call);
- ``attempt(call, args, kwargs)`` sends it (by default the SDK's own method with the same
  arguments; an adapter that injects through the arguments prepares the body here). It
  runs inside :meth:`~memtap.request.tap.Call.send`: with the call active, sent once more as the
  app built it when the provider rejects what memtap changed, an error recorded and raised;
- ``outcome(call, result)`` reports the response (``call.succeeded``, or a stream observed
  through :class:`~memtap.adapters.streamtap.StreamTap`) and returns what the app gets.

The wrapper has the form of the original: a plain function, a coroutine function, a
generator function or an async generator function (looked at through ``functools.wraps``
layers). For the two generator forms the request is sent when the first item is asked for,
and that first step runs as the call's attempt; ``outcome`` then gets an iterator of every
item and returns the one the app iterates.

Everything memtap does fails open: a ``begin`` that raises leaves the invocation untracked,
an ``outcome`` that raises leaves the result as the SDK returned it (both logged). The
app's own errors pass through unchanged.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from memtap.request.rejection import Classifier, is_validation_rejection
from memtap.request.tap import Call

log = logging.getLogger("memtap.adapters.tracked")

#: Starts the call for one invocation (``None``: not tracked).
Begin = Callable[[tuple[Any, ...], dict[str, Any]], Call | None]
#: Sends one invocation as ``call`` and returns the SDK's result.
Attempt = Callable[[Call, tuple[Any, ...], dict[str, Any]], Any]
#: Reports the result to ``call`` and returns what the app gets.
Outcome = Callable[[Call, Any], Any]

_END: Any = object()


def tracked(
    original: Callable[..., Any],
    begin: Begin,
    outcome: Outcome,
    *,
    attempt: Attempt | None = None,
    rejected: Classifier = is_validation_rejection,
    what: str = "provider",
) -> Callable[..., Any]:
    """``original`` wrapped so that each invocation is a tracked call (see the module
    docstring). ``rejected`` tells a validation rejection from other errors (HTTP 400/422
    by default); ``what`` names the calls in log messages (``"Gemini"``)."""
    try:
        target = inspect.unwrap(original)
    except ValueError:  # a ``__wrapped__`` chain that loops: judge the object itself
        target = original

    if inspect.iscoroutinefunction(target):

        @functools.wraps(original)
        async def coroutine(*args: Any, **kwargs: Any) -> Any:
            call = _begin(begin, args, kwargs, what)
            if call is None:
                return await original(*args, **kwargs)
            if attempt is None:
                result = await call.send_async(lambda: original(*args, **kwargs), rejected=rejected)
            else:
                result = await call.send_async(lambda: attempt(call, args, kwargs), rejected=rejected)
            return _outcome(outcome, call, result, what)

        return coroutine

    if inspect.isgeneratorfunction(target):

        @functools.wraps(original)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            call = _begin(begin, args, kwargs, what)
            if call is None:
                yield from original(*args, **kwargs)
                return

            def start() -> tuple[Iterator[Any], Any]:
                # The SDK's generator sends its request on its first step: that step is
                # the attempt (retried without memtap's changes if the provider rejects them).
                source = original(*args, **kwargs) if attempt is None else attempt(call, args, kwargs)
                return source, next(source, _END)

            source, first = call.send(start, rejected=rejected)
            yield from _outcome(outcome, call, _resumed(first, source), what)

        return generator

    if inspect.isasyncgenfunction(target):

        @functools.wraps(original)
        async def async_generator(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            call = _begin(begin, args, kwargs, what)
            if call is None:
                async for item in original(*args, **kwargs):
                    yield item
                return

            async def start() -> tuple[AsyncIterator[Any], Any]:
                source = original(*args, **kwargs) if attempt is None else attempt(call, args, kwargs)
                return source, await anext(source, _END)

            source, first = await call.send_async(start, rejected=rejected)
            shown = _outcome(outcome, call, _aresumed(first, source), what)
            try:
                async for item in shown:
                    yield item
            finally:
                # An async generator does not hand its close on to the one it iterates:
                # closed now, the call is finalised when the app stops, not when collected.
                aclose = getattr(shown, "aclose", None)
                if aclose is not None:
                    await aclose()

        return async_generator

    @functools.wraps(original)
    def function(*args: Any, **kwargs: Any) -> Any:
        call = _begin(begin, args, kwargs, what)
        if call is None:
            return original(*args, **kwargs)
        if attempt is None:
            result = call.send(lambda: original(*args, **kwargs), rejected=rejected)
        else:
            result = call.send(lambda: attempt(call, args, kwargs), rejected=rejected)
        return _outcome(outcome, call, result, what)

    return function


def _begin(begin: Begin, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Call | None:
    """``begin``'s call; ``None`` (untracked) when it raises."""
    try:
        return begin(args, kwargs)
    except Exception:
        log.exception("memtap could not start tracking a %s call; it proceeds untracked", what)
        return None


def _outcome(outcome: Outcome, call: Call, result: Any, what: str) -> Any:
    """What ``outcome`` returns; ``result`` itself when it raises."""
    try:
        return outcome(call, result)
    except Exception:
        log.exception("memtap could not capture a %s response", what)
        # The call is over for memtap: its span ends and it no longer counts as in flight
        # (a call left counted keeps the process from ever looking quiet).
        call.untracked(f"could not capture a {what} response")
        return result


def _resumed(first: Any, source: Iterator[Any]) -> Iterator[Any]:
    """``first`` (unless the stream was empty), then the rest of ``source``."""
    if first is not _END:
        yield first
    yield from source


async def _aresumed(first: Any, source: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The async form of :func:`_resumed`."""
    if first is not _END:
        yield first
    async for item in source:
        yield item
