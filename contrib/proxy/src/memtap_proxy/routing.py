"""Where a request goes: its agent prefix, protocol family and wire protocol."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from . import gemini

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
    gemini.FAMILY: ("--gemini-upstream", "MEMTAP_GEMINI_UPSTREAM"),
}


@attrs.frozen
class Route:
    """One request's route.

    ``path`` is the upstream path (agent prefix removed), ``agent`` the prefix's agent
    name, ``family`` ``"openai"``, ``"anthropic"`` or ``"gemini"``, ``protocol`` the wire
    protocol name for intercepted routes (``None``: passed through untouched). Gemini's
    model calls also carry the ``model`` their URL names and their answer's ``mode``
    (:func:`memtap_proxy.gemini.stream_mode`). ``guessed``: no route, header or prefix
    named the family (the request went to a default one).
    """

    path: str
    family: str
    protocol: str | None = None
    agent: str | None = None
    model: str | None = None
    mode: str | None = None
    guessed: bool = False


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
    query: bytes = b"",
) -> Route:
    """Route one request (``path`` without the query string, ``query`` without the
    ``?``). Gemini API paths go to Gemini's upstream. A request that names no family (no
    Anthropic route, header or agent prefix) goes to OpenAI's, or to Anthropic's when only
    that upstream is ``configured`` (a probe such as Claude Code's ``HEAD /`` then reaches
    the upstream its client uses)."""
    agent, path = split_agent_prefix(path, agents)
    hit = PROTOCOL_ROUTES.get(path) if method == "POST" else None
    if hit is not None:
        return Route(path=path, family=hit[0], protocol=hit[1], agent=agent)
    if gemini.is_gemini_path(path) or (path.startswith("/v1/") and gemini.is_gemini_request(headers, query)):
        return _gemini_route(method, path, query, agent)
    named = AGENT_FAMILIES.get(agent or "")
    if named is None and (path.startswith("/v1/messages") or _looks_anthropic(headers)):
        named = "anthropic"
    guessed = named is None and not path.startswith("/v1/") and not is_probe(method, path)
    if named is None:
        named = "anthropic" if "anthropic" in configured and "openai" not in configured else "openai"
    return Route(path=path, family=named, agent=agent, guessed=guessed)


def _gemini_route(method: str, path: str, query: bytes, agent: str | None) -> Route:
    """A Gemini API request: ``generateContent`` and ``streamGenerateContent`` (SSE with
    ``alt=sse``, else a JSON array) are read (injected into, captured); the rest (model
    lists, ``countTokens``, files...) is passed through."""
    mode = gemini.stream_mode(path, query) if method == "POST" else None
    call = gemini.model_call(path)
    protocol = gemini.PROTOCOL if mode is not None else None
    model = call[0] if call is not None else None
    return Route(path=path, family=gemini.FAMILY, protocol=protocol, agent=agent, model=model, mode=mode)


def upstream_url(base: str, path: str, query: bytes) -> str:
    """``base`` + ``path`` (+ query); a base ending in ``/v1`` is not doubled."""
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    url = base + path
    return f"{url}?{query.decode('latin-1')}" if query else url
