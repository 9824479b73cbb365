"""Which host a request names, and whether it is this machine only: the rules every memtap
server that listens on loopback by default shares (``memtap proxy``, ``memtap ui``,
``memtap mcp``), against DNS rebinding and against binding beyond loopback without a token."""

from __future__ import annotations

import functools
import ipaddress


def host_name(value: str) -> str:
    """The host name or address of a ``Host`` header value or a bind address: lower case,
    port and IPv6 brackets removed."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


@functools.lru_cache(maxsize=256)
def is_loopback_name(name: str) -> bool:
    """Whether ``name`` (lower case, without port or brackets: see :func:`host_name`) is
    ``localhost``, a ``.localhost`` name (loopback by RFC 6761; browsers never ask DNS for
    one, so a page cannot rebind it) or a loopback address."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a ``Host`` header value or an address to bind, port allowed) names
    this machine only."""
    return is_loopback_name(host_name(host))
