"""The proxy's settings (:class:`ProxyConfig`) and the rules on where it may listen."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from memtap.sdk.server import TokenRule, host_name, is_loopback_name

from .gemini import DEFAULT_UPSTREAM as DEFAULT_GEMINI_UPSTREAM
from .guard import Guard, normalize_host, normalize_origin

#: Default listening address and port.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8096
#: Where ``memtap proxy --ui`` serves the memory browser.
UI_PREFIX = "/_memtap"
#: Default request size limit (bytes): agent requests with images run to a few MB.
DEFAULT_MAX_BODY = 32 * 1024 * 1024

#: Environment variables read by ``memtap proxy`` (each mirrors a command-line flag).
ENV = {
    "openai_upstream": "MEMTAP_OPENAI_UPSTREAM",
    "anthropic_upstream": "MEMTAP_ANTHROPIC_UPSTREAM",
    "gemini_upstream": "MEMTAP_GEMINI_UPSTREAM",
    "token": "MEMTAP_PROXY_TOKEN",
    "host": "MEMTAP_PROXY_HOST",
    "port": "MEMTAP_PROXY_PORT",
    "max_body": "MEMTAP_PROXY_MAX_BODY",
    "tokens": "MEMTAP_PROXY_TOKENS",
    "allow_origin": "MEMTAP_PROXY_ALLOW_ORIGIN",
    "allow_host": "MEMTAP_PROXY_ALLOW_HOST",
    "header_timeout": "MEMTAP_PROXY_HEADER_TIMEOUT",
    "body_timeout": "MEMTAP_PROXY_BODY_TIMEOUT",
    "max_clients": "MEMTAP_PROXY_MAX_CLIENTS",
    "drain_timeout": "MEMTAP_PROXY_DRAIN_TIMEOUT",
    "workers": "MEMTAP_PROXY_WORKERS",
}


def _upstream(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    url = value.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"an upstream must be an http:// or https:// URL, got {value!r}")
    return url


def _origins(values: Iterable[str]) -> frozenset[str]:
    return frozenset(normalize_origin(v) for v in values)


def _hosts(values: Iterable[str]) -> frozenset[str]:
    return frozenset(normalize_host(v) for v in values)


def _rules(values: Iterable[TokenRule]) -> tuple[TokenRule, ...]:
    return tuple(values)


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be more than 0, got {value!r}")


@attrs.frozen
class ProxyConfig:
    """How one proxy runs.

    ``openai_upstream`` / ``anthropic_upstream`` / ``gemini_upstream`` are the base URLs
    requests of each family are sent to (``https://api.openai.com`` or
    ``https://api.openai.com/v1``; a trailing ``/v1`` is not doubled); a family without an
    upstream gets a 502 naming the flag to set. Gemini's defaults to Google's
    (``https://generativelanguage.googleapis.com``): a Gemini request only ever goes there.
    ``token``, when set, must come with every request in ``x-memtap-token`` and may
    act as any entity; ``tokens`` (from :func:`memtap.sdk.server.load_tokens`) are tokens
    bound to entities. ``allow_origins`` / ``allow_hosts`` are the web origins and host
    names let through besides loopback (:mod:`memtap_proxy.guard`). ``entity_id`` /
    ``session_id`` / ``process_id`` attribute requests that carry no ``x-memtap-*`` header.
    ``max_body`` is the request size limit in bytes.

    Clients: a request's head must arrive within ``header_timeout`` seconds of its first
    byte and its body within ``body_timeout`` seconds of its head; a connection with no
    request under way is closed after ``idle_timeout`` seconds; at most ``max_clients``
    connections are open (the longest-idle one is closed for a new one, else the new one
    gets a 503). On SIGTERM/SIGINT requests under way get ``drain_timeout`` seconds to
    finish. ``connect_timeout`` / ``read_timeout`` / ``max_connections`` are the upstream
    client's. ``ui_form_key`` keys the memory browser's forms (``ui``): the command makes
    one before it starts its workers, so that a form one worker served is taken by any.
    """

    openai_upstream: str | None = attrs.field(default=None, converter=_upstream)
    anthropic_upstream: str | None = attrs.field(default=None, converter=_upstream)
    gemini_upstream: str | None = attrs.field(default=DEFAULT_GEMINI_UPSTREAM, converter=_upstream)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = attrs.field(default=None, repr=False)
    tokens: tuple[TokenRule, ...] = attrs.field(default=(), converter=_rules, repr=False)
    allow_origins: frozenset[str] = attrs.field(default=(), converter=_origins)
    allow_hosts: frozenset[str] = attrs.field(default=(), converter=_hosts)
    max_body: int = DEFAULT_MAX_BODY
    entity_id: str = "default"
    session_id: str | None = None
    process_id: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    max_connections: int = 256
    header_timeout: float = attrs.field(default=10.0, validator=_positive)
    body_timeout: float = attrs.field(default=60.0, validator=_positive)
    idle_timeout: float = attrs.field(default=30.0, validator=_positive)
    max_clients: int = attrs.field(default=256, validator=_positive)
    drain_timeout: float = attrs.field(default=20.0, validator=_positive)
    ui: bool = False
    ui_form_key: bytes | None = attrs.field(default=None, repr=False)

    def upstream(self, family: str) -> str | None:
        """The configured upstream for ``"openai"``, ``"anthropic"`` or ``"gemini"``."""
        if family == "gemini":
            return self.gemini_upstream
        return self.anthropic_upstream if family == "anthropic" else self.openai_upstream

    def guard(self) -> Guard:
        """The admission rules these settings make (browsers, host names, tokens)."""
        return Guard(
            allow_origins=self.allow_origins,
            allow_hosts=self.allow_hosts,
            bound_host=self.host,
            token=self.token,
            tokens=self.tokens,
            default_entity=self.entity_id,
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    return is_loopback_name(host_name(host))


def check_bind(config: ProxyConfig) -> None:
    """Refuse to listen beyond loopback without a token (raises ``ValueError``)."""
    if not is_loopback(config.host) and not config.token and not config.tokens:
        raise ValueError(
            f"refusing to listen on {config.host}: anyone who can reach it could read and "
            f"change your memory. Bind 127.0.0.1 (the default), or set --token (or "
            f"{ENV['token']}), or --tokens FILE, and send it in the x-memtap-token header."
        )


def check_ui(config: ProxyConfig) -> None:
    """Refuse (``ValueError``) to serve the memory browser, which shows every entity, when
    the proxy's tokens are bound to entities (``--tokens``) without a ``--token`` for all."""
    if config.ui and config.tokens and not config.token:
        raise ValueError(
            "--ui shows every entity's memory: with --tokens (tokens bound to entities) it needs "
            "--token too, the token that may see them all (the UI asks for it)."
        )
