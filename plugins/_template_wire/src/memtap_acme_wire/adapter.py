"""Patching one Acme client instance so its calls go through memtap.

Two attributes are set on the instance (never on its class, so other clients are
untouched); ``memtap.sdk.Patches`` undoes exactly this on unregister:

- ``_build_body``, where the SDK builds its request JSON: hands the finished body of the
  client's active call to ``call.prepare``, which injects memory and returns the body to send;
- ``chat``, the public method, made a tracked call by ``memtap.sdk.tracked`` (sync or async
  like the method): ``begin`` starts the call, the SDK's own method sends it (sent once more
  as the app built it if the provider rejects what memtap changed), ``outcome`` captures
  the response or observes the stream's events with a ``memtap.sdk.StreamTap``.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from memtap.sdk import Call, Patches, StreamTap, Tap, active_call, tracked

from .protocol import AcmeChatProtocol

PROTOCOL = AcmeChatProtocol()


def is_acme_client(client: Any) -> bool:
    """Whether ``client`` is an Acme client, checked without importing the SDK (when the
    app has not imported it, none of its clients can exist)."""
    sdk = sys.modules.get("acme_wire_sdk")
    if sdk is None or isinstance(client, type):
        return False
    classes = tuple(c for c in (getattr(sdk, "AcmeClient", None), getattr(sdk, "AsyncAcmeClient", None)) if c)
    return bool(classes) and isinstance(client, classes)


def event_json(event: Any) -> Mapping[str, Any] | None:
    """An event's JSON (Acme's events already are plain dicts)."""
    return event if isinstance(event, Mapping) else None


def as_caller_sees(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An event as the caller would have got it had memtap not asked for usage: the
    usage-only event is hidden (``None``), the ``usage: null`` others then carry removed."""
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

        def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
            call = tap.begin(PROTOCOL, fallback_body=dict(kwargs))
            call.owner = client  # the body hook prepares only this client's calls
            return call

        patches = Patches()
        with patches.all_or_nothing():
            patches.wrap(client, "_build_body", lambda original: _body_hook(client, original))
            # Pass ``rejected=`` to ``tracked`` if your SDK's errors carry no HTTP status.
            patches.wrap(client, "chat", lambda original: tracked(original, begin, _outcome, what="Acme"))
        return patches.restore


def _body_hook(client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build_body(*args: Any, **kwargs: Any) -> Any:
        body = original(*args, **kwargs)
        call = active_call()
        if call is not None and call.owner is client and isinstance(body, Mapping):
            return call.prepare(body)
        return body

    return build_body


def _outcome(call: Call, result: Any) -> Any:
    """Capture a response; observe a stream's events as the caller reads them (replacing
    its inner iterator keeps the SDK's own stream type)."""
    if isinstance(result, Mapping):
        call.succeeded(result, event_json)
        return result
    tap = StreamTap(call, event_json, as_caller_sees)
    events = result._events
    result._events = tap.aiterate(events) if inspect.isasyncgen(events) else tap.iterate(events)
    return result
