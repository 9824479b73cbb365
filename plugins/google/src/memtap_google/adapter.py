"""Registering google-genai clients (``genai.Client`` and its ``.aio`` ``AsyncClient``).

Every model call of a google-genai client, sync or async, from ``models``, ``aio.models``
or a chat, goes through one ``BaseApiClient`` instance (``client._api_client``): memtap
patches that instance (never its class). ``request`` / ``request_streamed`` and their async
forms are wrapped to track the ``generateContent`` calls and read their responses;
``_build_request``, which every one of them uses to turn the converted camelCase body into
the HTTP request, is wrapped to inject into that final body.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from memtap.sdk import Begin, Call, Outcome, Patches, StreamTap, Tap, active_call, tracked

from .generate import GenerateContentProtocol

log = logging.getLogger("memtap.google")

GENERATE = GenerateContentProtocol()

#: The path suffixes of the calls memtap tracks (the model precedes them).
ROUTES = (":generateContent", ":streamGenerateContent")
_MARK = "_memtap_tapped"


def is_google_client(client: Any) -> bool:
    """Whether ``client`` is a google-genai client (checked without importing it)."""
    module = sys.modules.get("google.genai.client")
    if module is None or isinstance(client, type):
        return False
    bases = tuple(
        cls for cls in (getattr(module, "Client", None), getattr(module, "AsyncClient", None)) if cls
    )
    return bool(bases) and isinstance(client, bases)


def body_json(response: Any) -> Mapping[str, Any] | None:
    """The JSON body of one ``SdkHttpResponse`` (a whole response, or one streamed chunk)."""
    body = getattr(response, "body", None)
    if isinstance(body, str) and body:
        data = json.loads(body)
        return data if isinstance(data, Mapping) else None
    return body if isinstance(body, Mapping) else None


def _model(path: str) -> str | None:
    """The model named by a ``.../models/{model}:generateContent`` path."""
    head = path.split("?", 1)[0].split(":", 1)[0]
    return head.rsplit("/", 1)[-1] or None


def _path(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    path = args[1] if len(args) > 1 else kwargs.get("path")
    return path if isinstance(path, str) else ""


class GoogleAdapter:
    """Patches the API client under a google-genai client."""

    provider = "google"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Patch ``client._api_client``; return the restore function. A client whose API
        client is already patched (``client`` and ``client.aio`` share one) is left as is."""
        api = client._api_client
        if vars(api).get(_MARK):
            log.info("memtap: this google-genai API client is already registered (client and .aio share it)")
            return lambda: None
        begin = _beginner(api, tap)
        patches = Patches()
        with patches.all_or_nothing():
            patches.set(api, _MARK, True)
            patches.wrap(api, "_build_request", lambda original: _build_request(api, original))
            for name, outcome in SENDING.items():
                patches.set(api, name, tracked(getattr(api, name), begin, outcome, what="Gemini"))
        return patches.restore


def _beginner(api: Any, tap: Tap) -> Begin:
    """The ``begin`` of the API client's sending methods: a call for a ``generateContent``
    request (``None`` for any other route: passed through untracked)."""

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call | None:
        path = _path(args, kwargs)
        if not any(route in path for route in ROUTES):
            return None
        model = _model(path)
        body = args[2] if len(args) > 2 else kwargs.get("request_dict")
        fallback = {**body, "model": model} if isinstance(body, Mapping) and model else None
        call = tap.begin(GENERATE, fallback_body=fallback)
        call.owner = api
        call.url_model = model
        return call

    return begin


def _build_request(api: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """Inject into the final body of the active call's request."""

    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        request = original(*args, **kwargs)
        call = active_call()
        if call is not None and call.owner is api and isinstance(request.data, dict):
            request.data = _prepare(call, request.data)
        return request

    return build


def _prepare(call: Call, data: dict[str, Any]) -> Any:
    """The body to send: injected, with the model recorded for capture (Gemini bodies name
    none: it is in the URL) but never sent."""
    model = call.url_model
    if model is None or "model" in data:
        return call.prepare(data)
    sent = call.prepare({**data, "model": model})
    return {k: v for k, v in sent.items() if k != "model"}


def _succeeded(call: Call, response: Any) -> Any:
    """A response of ``request`` / ``async_request``, captured."""
    call.succeeded(response, body_json)
    return response


def _observed(call: Call, chunks: Iterator[Any]) -> Iterator[Any]:
    """The chunks of ``request_streamed`` (a generator), observed."""
    return StreamTap(call, body_json).iterate(chunks)


def _observed_async(call: Call, chunks: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The chunks of ``async_request_streamed`` (a coroutine returning an async
    generator), observed."""
    return StreamTap(call, body_json).aiterate(chunks)


#: The API client's methods that send a request (each tracked in its own form), and how
#: their result is reported.
SENDING: dict[str, Outcome] = {
    "request": _succeeded,
    "async_request": _succeeded,
    "request_streamed": _observed,
    "async_request_streamed": _observed_async,
}
