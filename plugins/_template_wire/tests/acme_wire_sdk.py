"""A tiny fictional "Acme" SDK, standing in for the real SDK your plugin supports.

It speaks an OpenAI-compatible chat endpoint (``POST {base_url}/chat/completions``) with
httpx, the way most SDKs are built: a public method takes the caller's arguments, a private
step builds the JSON body (:meth:`AcmeClient._build_body`), another sends it. Streams are
objects of the SDK's own type that iterate over the server's events.

Replace this file with your real SDK (and drop it from the tests).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx


class AcmeError(Exception):
    """An HTTP error from the Acme API."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status


def _body(model: str, messages: list[dict[str, Any]], stream: bool, extra: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages], **extra}
    if stream:
        body["stream"] = True
    return body


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


class AcmeStream:
    """The events of one streamed answer (iterate, or use as a context manager)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._events = _events(response.iter_lines())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._events

    def close(self) -> None:
        """Stop reading and release the connection."""
        self._events.close()
        self.response.close()

    def __enter__(self) -> AcmeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AcmeClient:
    """The synchronous Acme client."""

    def __init__(self, *, base_url: str, api_key: str) -> None:
        self._http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"})

    def _build_body(
        self, model: str, messages: list[dict[str, Any]], stream: bool, extra: dict[str, Any]
    ) -> Any:
        return _body(model, messages, stream, extra)

    def chat(
        self, *, model: str, messages: list[dict[str, Any]], stream: bool = False, **extra: Any
    ) -> dict[str, Any] | AcmeStream:
        """One chat completion: the response JSON, or an :class:`AcmeStream`."""
        body = self._build_body(model, messages, stream, extra)
        request = self._http.build_request("POST", "/chat/completions", json=body)
        response = self._http.send(request, stream=stream)
        if response.status_code != 200:
            response.read()
            raise AcmeError(response.status_code, response.text)
        if stream:
            return AcmeStream(response)
        result: dict[str, Any] = response.json()
        return result


class AsyncAcmeStream:
    """The events of one streamed answer, asynchronously."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._events = self._read()

    async def _read(self) -> AsyncIterator[dict[str, Any]]:
        async for line in self.response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._events

    async def close(self) -> None:
        """Stop reading and release the connection."""
        await self._events.aclose()
        await self.response.aclose()


class AsyncAcmeClient:
    """The asynchronous Acme client."""

    def __init__(self, *, base_url: str, api_key: str) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"})

    def _build_body(
        self, model: str, messages: list[dict[str, Any]], stream: bool, extra: dict[str, Any]
    ) -> Any:
        return _body(model, messages, stream, extra)

    async def chat(
        self, *, model: str, messages: list[dict[str, Any]], stream: bool = False, **extra: Any
    ) -> dict[str, Any] | AsyncAcmeStream:
        """One chat completion: the response JSON, or an :class:`AsyncAcmeStream`."""
        body = self._build_body(model, messages, stream, extra)
        request = self._http.build_request("POST", "/chat/completions", json=body)
        response = await self._http.send(request, stream=stream)
        if response.status_code != 200:
            await response.aread()
            raise AcmeError(response.status_code, response.text)
        if stream:
            return AsyncAcmeStream(response)
        result: dict[str, Any] = response.json()
        return result
