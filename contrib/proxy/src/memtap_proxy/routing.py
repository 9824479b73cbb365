"""Where a request goes: its agent prefix, protocol family and wire protocol."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

#: Intercepted routes (POST only): path -> (family, wire protocol name).
PROTOCOL_ROUTES = {
    "/v1/chat/completions": ("openai", "openai.chat"),
    "/v1/responses": ("openai", "openai.responses"),
    "/v1/messages": ("anthropic", "anthropic.messages"),
}
#: Which flag configures each family's upstream.
UPSTREAM_FLAGS = {
    "openai": ("--openai-upstream", "MEMTAP_OPENAI_UPSTREAM"),
    "anthropic": ("--anthropic-upstream", "MEMTAP_ANTHROPIC_UPSTREAM"),
}


@attrs.frozen
class Route:
    """One request's route.

    ``path`` is the upstream path (agent prefix removed), ``agent`` the prefix's agent
    name, ``family`` ``"openai"`` or ``"anthropic"``, ``protocol`` the wire protocol name
    for intercepted routes (``None``: passed through untouched).
    """

    path: str
    family: str
    protocol: str | None = None
    agent: str | None = None


def split_agent_prefix(path: str, agents: Collection[str]) -> tuple[str | None, str]:
    """``/claude-code/v1/messages`` -> ``("claude-code", "/v1/messages")`` when
    ``claude-code`` is a known agent; otherwise ``(None, path)``."""
    if path.count("/") < 2:
        return None, path
    first, rest = path[1:].split("/", 1)
    if first in agents:
        return first, "/" + rest
    return None, path


def _looks_anthropic(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() in (b"anthropic-version", b"x-api-key") for name, _ in headers)


def route(method: str, path: str, headers: Iterable[tuple[bytes, bytes]], agents: Collection[str]) -> Route:
    """Route one request (``path`` without the query string)."""
    agent, path = split_agent_prefix(path, agents)
    hit = PROTOCOL_ROUTES.get(path) if method == "POST" else None
    if hit is not None:
        return Route(path=path, family=hit[0], protocol=hit[1], agent=agent)
    if path.startswith("/v1/messages") or _looks_anthropic(headers):
        return Route(path=path, family="anthropic", agent=agent)
    return Route(path=path, family="openai", agent=agent)


def upstream_url(base: str, path: str, query: bytes) -> str:
    """``base`` + ``path`` (+ query); a base ending in ``/v1`` is not doubled."""
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    url = base + path
    return f"{url}?{query.decode('latin-1')}" if query else url
