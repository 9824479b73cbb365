"""A tiny SDK of each method form, and a provider plugin for it built with the patch kit
only (``memtap.sdk``: ``Patches``, ``tracked``, ``StreamTap``), for the kit's own tests.

The SDK is shaped like real ones: a private step builds the JSON body
(``_build_body``), public methods send it to an OpenAI-compatible chat endpoint with httpx
(the scripted model server) and return the JSON, or stream its events. ``KitClient`` has a
plain method and a generator method, ``AsyncKitClient`` a coroutine method and an async
generator method: the four forms ``tracked`` wraps.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import httpx

from memtap.sdk import (
    CHAT_CODEC,
    Call,
    ChatFormatProtocol,
    InjectionPlan,
    Patches,
    StreamTap,
    Tap,
    active_call,
    hookimpl,
    layout_messages,
    tracked,
)


class KitError(Exception):
    """An HTTP error of the kit SDK (``status_code``, as most SDKs carry it)."""

    def __init__(self, status_code: int, text: str) -> None:
        super().__init__(f"HTTP {status_code}: {text}")
        self.status_code = status_code


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


class KitClient:
    """The synchronous client: ``chat`` returns the JSON, ``chat_stream`` yields events."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=10)

    def _build_body(self, kwargs: Mapping[str, Any]) -> Any:
        return {"model": "kit-1", **kwargs}

    def chat(self, **kwargs: Any) -> dict[str, Any]:
        response = self.http.post("/chat/completions", json=self._build_body(kwargs))
        if response.status_code != 200:
            raise KitError(response.status_code, response.text)
        result: dict[str, Any] = response.json()
        return result

    def chat_stream(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        body = self._build_body({**kwargs, "stream": True})
        with self.http.stream("POST", "/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise KitError(response.status_code, response.text)
            yield from _events(response.iter_lines())


class AsyncKitClient:
    """The asynchronous client: the same two methods, a coroutine and an async generator."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url  # a connection per call: each test runs its own event loop

    def _build_body(self, kwargs: Mapping[str, Any]) -> Any:
        return {"model": "kit-1", **kwargs}

    async def chat(self, **kwargs: Any) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as http:
            response = await http.post("/chat/completions", json=self._build_body(kwargs))
        if response.status_code != 200:
            raise KitError(response.status_code, response.text)
        result: dict[str, Any] = response.json()
        return result

    async def chat_stream(self, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        body = self._build_body({**kwargs, "stream": True})
        async with (
            httpx.AsyncClient(base_url=self.base_url, timeout=10) as http,
            http.stream("POST", "/chat/completions", json=body) as response,
        ):
            if response.status_code != 200:
                await response.aread()
                raise KitError(response.status_code, response.text)
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    yield json.loads(line[6:])


class KitProtocol(ChatFormatProtocol):
    """The chat format; history and blocks laid out as the openai plugin does."""

    name = "kit.chat"
    provider = "kit"

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        out = dict(body)
        out["messages"] = layout_messages(list(body.get("messages") or ()), plan, CHAT_CODEC)
        return out


KIT = KitProtocol()


def event_json(event: Any) -> Mapping[str, Any] | None:
    return event if isinstance(event, Mapping) else None


def outcome(call: Call, result: Any) -> Any:
    """A response is captured; a stream (either form) is observed."""
    if isinstance(result, Mapping):
        call.succeeded(result, event_json)
        return result
    tap = StreamTap(call, event_json)
    return tap.aiterate(result) if hasattr(result, "__aiter__") else tap.iterate(result)


class KitAdapter:
    """Patches a kit client instance: its body step prepares, its methods are tracked."""

    provider = "kit"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
            call = tap.begin(KIT, fallback_body=dict(kwargs))
            call.owner = client
            return call

        patches = Patches()
        with patches.all_or_nothing():
            patches.wrap(client, "_build_body", lambda original: _body_hook(client, original))
            for name in ("chat", "chat_stream"):
                patches.wrap(client, name, lambda original: tracked(original, begin, outcome, what="kit"))
        return patches.restore


def _body_hook(client: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        body = original(*args, **kwargs)
        call = active_call()
        if call is not None and call.owner is client:
            return call.prepare(body)
        return body

    return build


class KitPlugin:
    """The provider plugin for the kit SDK."""

    @hookimpl
    def memtap_match_client(self, client: Any) -> KitAdapter | None:
        return KitAdapter() if isinstance(client, (KitClient, AsyncKitClient)) else None

    @hookimpl
    def memtap_wire_protocols(self) -> list[KitProtocol]:
        return [KIT]
