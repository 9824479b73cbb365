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
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from typing import Any

from memtap.sdk import Call, Tap, active_call

from .generate import GenerateContentProtocol

log = logging.getLogger("memtap.google")

GENERATE = GenerateContentProtocol()

#: The path suffixes of the calls memtap tracks (the model precedes them).
ROUTES = (":generateContent", ":streamGenerateContent")
_MARK = "_memtap_tapped"
_MISSING = object()
_END = object()


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
        installer = _Installer(api, tap)
        wrappers = {
            "_build_request": installer.build_request,
            "request": installer.request,
            "request_streamed": installer.request_streamed,
            "async_request": installer.async_request,
            "async_request_streamed": installer.async_request_streamed,
        }
        undo = [_set(api, _MARK, True)]
        try:
            for name, wrap in wrappers.items():
                undo.append(_set(api, name, wrap(getattr(api, name))))
        except Exception:
            for step in reversed(undo):
                step()
            raise

        def restore() -> None:
            for step in reversed(undo):
                step()

        return restore


class _Installer:
    """The wrappers for one API client instance."""

    def __init__(self, api: Any, tap: Tap) -> None:
        self.api = api
        self.tap = tap

    def begin(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Call | None:
        """A tracked call for a ``generateContent`` request (``None`` for anything else, or
        when memtap cannot track it: the call then proceeds untracked)."""
        path = _path(args, kwargs)
        if not any(route in path for route in ROUTES):
            return None
        try:
            model = _model(path)
            body = args[2] if len(args) > 2 else kwargs.get("request_dict")
            fallback = {**body, "model": model} if isinstance(body, Mapping) and model else None
            call = self.tap.begin(GENERATE, fallback_body=fallback)
            call.owner = self.api
            call.url_model = model
            return call
        except Exception:
            log.exception("memtap could not start tracking a Gemini call; it proceeds untracked")
            return None

    # -- the body ------------------------------------------------------------------------

    def build_request(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Inject into the final body of the active call's request."""

        @functools.wraps(original)
        def build(*args: Any, **kwargs: Any) -> Any:
            request = original(*args, **kwargs)
            call = active_call()
            if call is not None and call.owner is self.api and isinstance(request.data, dict):
                request.data = _prepare(call, request.data)
            return request

        return build

    # -- the calls -----------------------------------------------------------------------

    def request(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Track one ``generateContent`` call."""

        @functools.wraps(original)
        def request(*args: Any, **kwargs: Any) -> Any:
            call = self.begin(args, kwargs)
            if call is None:
                return original(*args, **kwargs)
            response = call.send(lambda: original(*args, **kwargs))
            _succeeded(call, response)
            return response

        return request

    def async_request(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Track one async ``generateContent`` call."""

        @functools.wraps(original)
        async def async_request(*args: Any, **kwargs: Any) -> Any:
            call = self.begin(args, kwargs)
            if call is None:
                return await original(*args, **kwargs)
            response = await call.send_async(lambda: original(*args, **kwargs))
            _succeeded(call, response)
            return response

        return async_request

    def request_streamed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Track one ``streamGenerateContent`` call: the SDK's generator sends the request
        on its first step, which runs with the call active; every chunk is observed."""

        @functools.wraps(original)
        def request_streamed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            call = self.begin(args, kwargs)
            if call is None:
                yield from original(*args, **kwargs)
                return

            def start() -> tuple[Generator[Any, None, None], Any]:
                source = original(*args, **kwargs)
                return source, next(source, _END)

            source, item = call.send(start)
            try:
                while item is not _END:
                    call.stream_item(item)
                    yield item
                    item = next(source, _END)
            except GeneratorExit:
                call.stream_finished(body_json, partial=True)
                source.close()
                raise
            except BaseException as exc:
                call.stream_finished(body_json, error=exc)
                raise
            call.stream_finished(body_json)

        return request_streamed

    def async_request_streamed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Track one async ``streamGenerateContent`` call (sent when awaited)."""

        @functools.wraps(original)
        async def async_request_streamed(*args: Any, **kwargs: Any) -> Any:
            call = self.begin(args, kwargs)
            if call is None:
                return await original(*args, **kwargs)
            source = await call.send_async(lambda: original(*args, **kwargs))
            return _observe_async(call, source)

        return async_request_streamed


def _prepare(call: Call, data: dict[str, Any]) -> Any:
    """The body to send: injected, with the model recorded for capture (Gemini bodies name
    none: it is in the URL) but never sent."""
    model = call.url_model
    if model is None or "model" in data:
        return call.prepare(data)
    sent = call.prepare({**data, "model": model})
    return {k: v for k, v in sent.items() if k != "model"}


def _succeeded(call: Call, response: Any) -> None:
    try:
        call.succeeded(response, body_json)
    except Exception:
        log.exception("memtap could not capture a Gemini response")


async def _observe_async(call: Call, source: Any) -> AsyncIterator[Any]:
    try:
        async for item in source:
            call.stream_item(item)
            yield item
    except GeneratorExit:
        call.stream_finished(body_json, partial=True)
        raise
    except BaseException as exc:
        call.stream_finished(body_json, error=exc)
        raise
    call.stream_finished(body_json)


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
