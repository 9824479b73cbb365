"""An SDK method whose keyword arguments are the request body, tracked in one call.

Many OpenAI-compatible SDKs take the request's JSON fields as keyword arguments
(``client.chat(model=..., messages=..., stream=True)``) and return the response JSON (or an
object with ``model_dump()``), or, for ``stream=True``, an iterator of event JSON. For such
a method :func:`tracked_kwargs` is the whole adapter: the keyword arguments are the app's
body, memtap's prepared body is what the SDK is called with, the response is captured and
a stream observed as the app reads it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from memtap.adapters.streamtap import EventFilter, JsonFn, StreamTap
from memtap.adapters.tracked import tracked
from memtap.formats.openai_chat import as_mapping
from memtap.protocol.wire import WireProtocol
from memtap.request.rejection import Classifier, is_validation_rejection
from memtap.request.tap import Call, Tap

__all__ = ["tracked_kwargs"]


def tracked_kwargs(
    original: Callable[..., Any],
    tap: Tap,
    protocol: WireProtocol,
    *,
    to_json: JsonFn = as_mapping,
    event_filter: EventFilter | None = None,
    rejected: Classifier = is_validation_rejection,
    what: str = "provider",
) -> Callable[..., Any]:
    """``original`` (a plain or ``async`` method) as a tracked call in ``protocol``, its
    keyword arguments read as the request body.

    Per call: the keyword arguments are the app's body; ``original`` is called with the
    same positional arguments and the body memtap prepared as keyword arguments (sent once
    more with the app's own if the provider rejects what memtap changed: ``rejected``).
    When the body says ``stream``, the result is taken for an iterator (or async iterator)
    of events, and the app gets a generator over the same events, observed by a
    :class:`~memtap.adapters.streamtap.StreamTap` (``event_filter``: the protocol's
    ``caller_event`` when it has one, as :class:`~memtap.formats.openai_chat.ChatFormatProtocol`
    does); otherwise the result is captured as it is. ``to_json`` turns a response or
    event into wire JSON (mappings as they are, ``model_dump()`` objects dumped).

    For an SDK whose stream is an object the app uses besides iterating it (``close()``,
    a context manager), write ``tracked``'s ``outcome`` yourself (see
    ``plugins/_template_wire``).
    """
    shown = event_filter if event_filter is not None else getattr(protocol, "caller_event", None)

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        return tap.begin(protocol, fallback_body=dict(kwargs))

    def attempt(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return original(*args, **call.prepare(call.app_body or kwargs))

    async def attempt_async(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await original(*args, **await call.prepare_async(call.app_body or kwargs))

    def outcome(call: Call, result: Any) -> Any:
        body: Mapping[str, Any] = call.app_body or {}
        if not body.get("stream"):
            call.succeeded(result, to_json)
            return result
        stream = StreamTap(call, to_json, shown)
        return stream.aiterate(result) if hasattr(result, "__aiter__") else stream.iterate(result)

    is_async = inspect.iscoroutinefunction(inspect.unwrap(original))
    return tracked(
        original, begin, outcome, attempt=attempt_async if is_async else attempt, rejected=rejected, what=what
    )
