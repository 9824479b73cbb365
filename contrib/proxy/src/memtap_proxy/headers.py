"""Which headers cross the proxy, in each direction.

Hop-by-hop headers (RFC 9110 §7.6.1, plus any named in ``Connection``) stop at the proxy;
memtap's own ``x-memtap-*`` control headers are read and never forwarded. Everything else,
credentials included (``Authorization``, ``x-api-key``, ``anthropic-version``...), goes to
the upstream untouched and is never stored or logged.
"""

from __future__ import annotations

from collections.abc import Iterable

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
#: Request headers the proxy sets itself for the upstream (``expect``: the proxy already
#: has the whole body).
_REQUEST_OWN = frozenset({b"host", b"content-length", b"expect"})
#: Response headers recomputed by the server side (length may change, e.g. a hidden event).
_RESPONSE_OWN = frozenset({b"content-length", b"date", b"server"})
MEMTAP_PREFIX = b"x-memtap-"

RawHeaders = list[tuple[bytes, bytes]]


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return tokens


def upstream_request_headers(headers: Iterable[tuple[bytes, bytes]], *, identity: bool) -> RawHeaders:
    """The client's headers as the upstream should get them.

    ``identity`` asks the upstream for an uncompressed answer (for the routes whose answer
    memtap reads on the side).
    """
    headers = list(headers)
    drop = _connection_tokens(headers)
    out: RawHeaders = []
    for name, value in headers:
        low = name.lower()
        if (
            low in HOP_BY_HOP
            or low in _REQUEST_OWN
            or low in drop
            or low.startswith(MEMTAP_PREFIX)
            or (identity and low == b"accept-encoding")
        ):
            continue
        out.append((low, value))
    if identity:
        out.append((b"accept-encoding", b"identity"))
    return out


def client_response_headers(headers: Iterable[tuple[bytes, bytes]], *, keep_length: bool) -> RawHeaders:
    """The upstream's response headers as the client should get them."""
    headers = list(headers)
    drop = _connection_tokens(headers)
    out: RawHeaders = []
    for name, value in headers:
        low = name.lower()
        if low in HOP_BY_HOP or low in drop:
            continue
        if low in _RESPONSE_OWN and not (keep_length and low == b"content-length"):
            continue
        out.append((low, value))
    return out


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header ``name`` (lower-case), decoded, or ``None``."""
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
