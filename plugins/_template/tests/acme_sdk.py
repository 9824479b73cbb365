"""A tiny fictional "Acme" SDK, standing in for the real SDK your plugin supports.

Like many providers' SDKs, its client speaks OpenAI Chat Completions over HTTP (``POST
{base_url}/chat/completions``, with httpx): ``chat(model=..., messages=..., **fields)``
sends those keyword arguments as the request JSON and returns the response JSON, or, with
``stream=True``, an iterator over the server's events (an async one for the async client).

Replace this file with your real SDK (and drop it from the tests).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx


class AcmeError(Exception):
    """An HTTP error from the Acme API (``status_code``: how memtap tells a rejection)."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(f"HTTP {status_code}: {body}")
        self.status_code = status_code


def _body(model: str, messages: list[dict[str, Any]], stream: bool, fields: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, **fields}
    if stream:
        body["stream"] = True
    return body


def _event(line: str) -> dict[str, Any] | None:
    return json.loads(line[6:]) if line.startswith("data: ") and line != "data: [DONE]" else None


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    try:
        for line in response.iter_lines():
            if (event := _event(line)) is not None:
                yield event
    finally:
        response.close()


async def _aevents(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    try:
        async for line in response.aiter_lines():
            if (event := _event(line)) is not None:
                yield event
    finally:
        await response.aclose()


class AcmeClient:
    """The synchronous Acme client."""

    def __init__(self, *, base_url: str, api_key: str) -> None:
        self._http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"})

    def chat(self, *, model: str, messages: list[dict[str, Any]], stream: bool = False, **fields: Any) -> Any:
        """One chat completion: the response JSON, or an iterator of its stream's events."""
        body = _body(model, messages, stream, fields)
        request = self._http.build_request("POST", "/chat/completions", json=body)
        response = self._http.send(request, stream=stream)
        if response.status_code != 200:
            response.read()
            response.close()
            raise AcmeError(response.status_code, response.text)
        return _events(response) if stream else response.json()


class AsyncAcmeClient:
    """The asynchronous Acme client."""

    def __init__(self, *, base_url: str, api_key: str) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"})

    async def chat(
        self, *, model: str, messages: list[dict[str, Any]], stream: bool = False, **fields: Any
    ) -> Any:
        """One chat completion: the response JSON, or an async iterator of its events."""
        body = _body(model, messages, stream, fields)
        request = self._http.build_request("POST", "/chat/completions", json=body)
        response = await self._http.send(request, stream=stream)
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            raise AcmeError(response.status_code, response.text)
        return _aevents(response) if stream else response.json()
