"""Patching one Acme client instance so its calls go through memtap.

Two attributes are set on the instance (never on its class, so other clients are
untouched, and ``restore`` undoes exactly this):

- ``chat``, the public method: starts a tracked call, runs the SDK's own method through
  ``call.send`` (the call active; sent again as the app built it if the provider rejects
  what memtap changed), then reports the response, or observes the stream's events;
- ``_build_body``, where the SDK builds its request JSON: hands the finished body to
  ``call.prepare``, which injects memory and returns the body to send.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from memtap.sdk import Call, Tap, active_call

from .protocol import AcmeChatProtocol

log = logging.getLogger("memtap.acme")

PROTOCOL = AcmeChatProtocol()
_MISSING = object()


def is_acme_client(client: Any) -> bool:
    """Whether ``client`` is an Acme client, checked without importing the SDK (when the
    app has not imported it, none of its clients can exist)."""
    sdk = sys.modules.get("acme_sdk")
    if sdk is None or isinstance(client, type):
        return False
    classes = tuple(c for c in (getattr(sdk, "AcmeClient", None), getattr(sdk, "AsyncAcmeClient", None)) if c)
    return bool(classes) and isinstance(client, classes)


def event_json(event: Any) -> Mapping[str, Any] | None:
    """An event's JSON (Acme's events already are plain dicts)."""
    return event if isinstance(event, Mapping) else None


def as_caller_sees(call: Call, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The event as the caller would have got it had memtap not asked for usage: the
    usage-only event is hidden (``None``), the ``usage: null`` others then carry removed."""
    if not call.hide_usage_event:
        return event
    if PROTOCOL.is_hidden_usage_event(event):
        return None
    if "usage" in event and event["usage"] is None:
        return {k: v for k, v in event.items() if k != "usage"}
    return event


class AcmeAdapter:
    """memtap's adapter for Acme clients (returned by ``memtap_match_client``)."""

    provider = "acme"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Patch ``client``; return the function that restores it."""
        undo = [
            _set(client, "_build_body", _body_hook(client, client._build_body)),
            _set(client, "chat", _tracked(client, tap, client.chat)),
        ]

        def restore() -> None:
            for step in reversed(undo):
                step()

        return restore


def _body_hook(client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build_body(*args: Any, **kwargs: Any) -> Any:
        body = original(*args, **kwargs)
        call = active_call()
        if call is not None and call.owner is client and isinstance(body, Mapping):
            return call.prepare(body)
        return body

    return build_body


def _begin(client: Any, tap: Tap, kwargs: Mapping[str, Any]) -> Call | None:
    try:
        call = tap.begin(PROTOCOL, fallback_body=dict(kwargs))
        call.owner = client
        return call
    except Exception:
        log.exception("memtap could not track an Acme call; it proceeds untracked")
        return None


def _outcome(call: Call, result: Any) -> None:
    try:
        if isinstance(result, Mapping):
            call.succeeded(result, event_json)
        elif inspect.isasyncgen(getattr(result, "_events", None)):
            result._events = _observe_async(call, result._events)
        else:
            result._events = _observe(call, result._events)
    except Exception:
        log.exception("memtap could not capture an Acme response")


def _tracked(client: Any, tap: Tap, original: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def chat_async(*args: Any, **kwargs: Any) -> Any:
            call = _begin(client, tap, kwargs)
            if call is None:
                return await original(*args, **kwargs)
            # send_async runs the SDK's method with the call active, and sends the app's
            # own request once more if the provider rejects (HTTP 400/422) what memtap
            # changed; pass ``rejected=`` if your SDK's errors carry no HTTP status.
            result = await call.send_async(lambda: original(*args, **kwargs))
            _outcome(call, result)
            return result

        return chat_async

    @functools.wraps(original)
    def chat(*args: Any, **kwargs: Any) -> Any:
        call = _begin(client, tap, kwargs)
        if call is None:
            return original(*args, **kwargs)
        result = call.send(lambda: original(*args, **kwargs))
        _outcome(call, result)
        return result

    return chat


def _observe(call: Call, source: Iterator[Any]) -> Iterator[Any]:
    """Pass every event on (as the caller would have seen it), then report the end once:
    finished, failed, or abandoned early (closed or garbage-collected: partial)."""
    try:
        for event in source:
            call.stream_item(event)
            shown = as_caller_sees(call, event)
            if shown is not None:
                yield shown
    except GeneratorExit:
        call.stream_finished(event_json, partial=True)
        raise
    except BaseException as exc:
        call.stream_finished(event_json, error=exc)
        raise
    call.stream_finished(event_json)


async def _observe_async(call: Call, source: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The async form of :func:`_observe`."""
    try:
        async for event in source:
            call.stream_item(event)
            shown = as_caller_sees(call, event)
            if shown is not None:
                yield shown
    except GeneratorExit:
        call.stream_finished(event_json, partial=True)
        raise
    except BaseException as exc:
        call.stream_finished(event_json, error=exc)
        raise
    call.stream_finished(event_json)


def _set(obj: Any, name: str, value: Any) -> Callable[[], None]:
    """Set an instance attribute; return the function that undoes it exactly."""
    previous = vars(obj).get(name, _MISSING)
    setattr(obj, name, value)

    def undo() -> None:
        if previous is _MISSING:
            vars(obj).pop(name, None)
        else:
            setattr(obj, name, previous)

    return undo
