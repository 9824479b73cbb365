"""The proxy's settings (:class:`ProxyConfig`) and the rules on where it may listen."""

from __future__ import annotations

import ipaddress

import attrs

#: Default listening address and port.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8096
#: Default request size limit (bytes): agent requests with images run to a few MB.
DEFAULT_MAX_BODY = 32 * 1024 * 1024

#: Environment variables read by ``memtap proxy`` (each mirrors a command-line flag).
ENV = {
    "openai_upstream": "MEMTAP_OPENAI_UPSTREAM",
    "anthropic_upstream": "MEMTAP_ANTHROPIC_UPSTREAM",
    "token": "MEMTAP_PROXY_TOKEN",
    "host": "MEMTAP_PROXY_HOST",
    "port": "MEMTAP_PROXY_PORT",
    "max_body": "MEMTAP_PROXY_MAX_BODY",
}


def _upstream(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    url = value.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"an upstream must be an http:// or https:// URL, got {value!r}")
    return url


@attrs.frozen
class ProxyConfig:
    """How one proxy runs.

    ``openai_upstream`` / ``anthropic_upstream`` are the base URLs requests of each family
    are sent to (``https://api.openai.com`` or ``https://api.openai.com/v1``; a trailing
    ``/v1`` is not doubled); a family without an upstream gets a 502 naming the flag to
    set. ``token``, when set, must come with every request in ``x-memtap-token``.
    ``entity_id`` / ``session_id`` / ``process_id`` attribute requests that carry no
    ``x-memtap-*`` header (``session_id=None``: the agent's own session, else one derived
    from each conversation; see :mod:`memtap_proxy.attribution`). ``max_body`` is the
    request size limit in bytes.
    """

    openai_upstream: str | None = attrs.field(default=None, converter=_upstream)
    anthropic_upstream: str | None = attrs.field(default=None, converter=_upstream)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    entity_id: str = "default"
    session_id: str | None = None
    process_id: str | None = None
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    max_connections: int = 256

    def upstream(self, family: str) -> str | None:
        """The configured upstream for ``"openai"`` or ``"anthropic"``."""
        return self.anthropic_upstream if family == "anthropic" else self.openai_upstream


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(config: ProxyConfig) -> None:
    """Refuse to listen beyond loopback without a token (raises ``ValueError``)."""
    if not is_loopback(config.host) and not config.token:
        raise ValueError(
            f"refusing to listen on {config.host}: anyone who can reach it could read and "
            f"change your memory. Bind 127.0.0.1 (the default), or set --token (or "
            f"{ENV['token']}) and send it in the x-memtap-token header."
        )
