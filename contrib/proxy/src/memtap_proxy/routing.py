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


#: The family of the agents whose URL prefix says it (the others speak either).
AGENT_FAMILIES = {"claude-code": "anthropic", "codex": "openai"}
#: Methods of a probe (a client checking the proxy is there, e.g. Claude Code's ``HEAD /``).
PROBE_METHODS = frozenset({"HEAD", "GET", "OPTIONS"})


def _looks_anthropic(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() in (b"anthropic-version", b"x-api-key") for name, _ in headers)


def is_probe(method: str, path: str) -> bool:
    """Whether a request only checks that the server is there: a ``HEAD``/``GET``/
    ``OPTIONS`` outside the API's ``/v1/`` routes (``/``, ``/health``...)."""
    return method in PROBE_METHODS and not path.startswith(("/v1/", "/v1beta/"))


def route(
    method: str,
    path: str,
    headers: Iterable[tuple[bytes, bytes]],
    agents: Collection[str],
    configured: Collection[str] = ("openai", "anthropic"),
) -> Route:
    """Route one request (``path`` without the query string). A request that names no
    family (no Anthropic route, header or agent prefix) goes to OpenAI's, or to
    Anthropic's when only that upstream is ``configured`` (a probe such as Claude Code's
    ``HEAD /`` then reaches the upstream its client uses)."""
    agent, path = split_agent_prefix(path, agents)
    hit = PROTOCOL_ROUTES.get(path) if method == "POST" else None
    if hit is not None:
        return Route(path=path, family=hit[0], protocol=hit[1], agent=agent)
    named = AGENT_FAMILIES.get(agent or "")
    if named is None and (path.startswith("/v1/messages") or _looks_anthropic(headers)):
        named = "anthropic"
    if named is None:
        named = "anthropic" if "anthropic" in configured and "openai" not in configured else "openai"
    return Route(path=path, family=named, agent=agent)


def upstream_url(base: str, path: str, query: bytes) -> str:
    """``base`` + ``path`` (+ query); a base ending in ``/v1`` is not doubled."""
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    url = base + path
    return f"{url}?{query.decode('latin-1')}" if query else url
