"""Who may use the proxy, decided before anything is read, forwarded or run.

:meth:`Guard.screen` refuses what a web page in the user's browser can send: a request
whose ``Host`` is not a loopback name or address, the connection's own address, the
address the proxy is bound to or an ``--allow-host`` name (DNS rebinding: a page whose host
name resolves to 127.0.0.1), a request carrying an ``Origin`` not in ``--allow-origin``
(browsers send ``Origin`` with every POST, cross-origin or not, and with cross-origin
fetches, preflights included), and a request the browser marks ``Sec-Fetch-Site:
cross-site`` or ``same-site`` without an allowed origin (``<img src>``, links, forms; a
page on ``http://localhost:3000`` is same-site with the proxy). Refusals carry no CORS
headers, so a page cannot even read them.

:meth:`Guard.admit` then checks the ``x-memtap-token`` header (when tokens are
configured), and the entity the request names must be one its token's grant allows
(:mod:`memtap.tokens`, through :mod:`memtap.sdk`): :meth:`Guard.check` does all three when
a request arrives, and :meth:`Guard.bind` checks the attribution a request ends up with
before memory is touched.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

import attrs

from memtap.sdk import Attribution
from memtap.sdk.server import EVERY_ENTITY, Grant, TokenRule, TokenTable, host_name, is_loopback_name
from memtap.sdk.server import token_digest as digest

from .asgi import RawHeaders

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_SHOWN = 100
#: How many distinct accepted ``Host`` values a guard remembers (a request's usual path).
_KNOWN_HOSTS = 64
ENTITY_HEADER = b"x-memtap-entity"
TOKEN_HEADER = b"x-memtap-token"


class Refused(Exception):
    """A request is refused: its HTTP status and a one-line message saying what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def normalize_origin(value: str) -> str:
    """An origin as browsers send it: ``scheme://host[:port]``, lower case, without the
    scheme's default port (``ValueError`` for anything else: a path, a wildcard, ``null``)."""
    text = value.strip()
    parts = urlsplit(text)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ValueError(
            f"an allowed origin is `scheme://host[:port]`, e.g. http://localhost:3000; got {value!r}"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"an allowed origin has a bad port: {value!r}") from exc
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def normalize_host(value: str) -> str:
    """An ``--allow-host`` value as it is compared (``ValueError`` when it is not a bare
    host name or address)."""
    name = host_name(value)
    if not name or any(c in name for c in "/@?#* \t") or name.startswith("http"):
        raise ValueError(f"an allowed host is a host name or address such as devbox.lan; got {value!r}")
    return name


def _shown(value: str) -> str:
    """A client-sent value as it may appear in a refusal: printable and short."""
    text = "".join(c if c.isprintable() else "?" for c in value)
    return text[:_MAX_SHOWN]


class Guard:
    """The proxy's admission rules (see the module's docstring)."""

    def __init__(
        self,
        *,
        allow_origins: Iterable[str] = (),
        allow_hosts: Iterable[str] = (),
        bound_host: str | None = None,
        token: str | None = None,
        tokens: Iterable[TokenRule] = (),
        default_entity: str = "default",
    ) -> None:
        self.allow_origins = frozenset(normalize_origin(o) for o in allow_origins)
        hosts = {normalize_host(h) for h in allow_hosts}
        if bound_host:
            name = host_name(bound_host)
            try:
                unspecified = ipaddress.ip_address(name).is_unspecified
            except ValueError:
                unspecified = False
            if not unspecified:  # 0.0.0.0 / ::: the connection's own address is allowed instead
                hosts.add(name)
        self.allow_hosts = frozenset(hosts)
        self._accepted: set[tuple[bytes, str | None]] = set()  # (Host, server address)
        rules = list(tokens)
        if token:
            rules.append(TokenRule(digest(token), EVERY_ENTITY))
        self.tokens = TokenTable(rules) if rules else None
        self.default_entity = default_entity

    def check(self, headers: RawHeaders, server: tuple[str, int] | None) -> Grant:
        """The grant of a request (:class:`Refused` if a web page may have sent it, its token
        is wrong, or the entity it names is not its token's); ``server`` is the address the
        connection arrived at (the ASGI scope's ``server``)."""
        self.screen(headers, server)
        grant = self.admit(headers)
        if not grant.every_entity:
            self.check_entity(grant, self.claimed_entity(grant, headers))
        return grant

    # -- browsers and host names -------------------------------------------------------------

    def screen(self, headers: RawHeaders, server: tuple[str, int] | None) -> None:
        """Raise :class:`Refused` for a request a browser page may have sent."""
        host = origin = site = None
        for name, value in headers:  # ASGI header names are lower case
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                site = value
        if host is not None:
            seen = (host, server[0] if server else None)
            if seen not in self._accepted:
                self._check_host(host.decode("latin-1"), server)
                if len(self._accepted) < _KNOWN_HOSTS:
                    self._accepted.add(seen)
        if origin is not None:
            self._check_origin(origin.decode("latin-1"))
        elif site in (b"cross-site", b"same-site"):
            raise Refused(
                403,
                "memtap proxy: refused a request a web page sent (Sec-Fetch-Site: "
                f"{site.decode('latin-1')}); memory is only for local clients",
            )

    def _check_host(self, value: str, server: tuple[str, int] | None) -> None:
        name = host_name(value)
        if name in self.allow_hosts or is_loopback_name(name):
            return
        if server is not None and name == server[0].lower():
            return
        shown = _shown(name)
        raise Refused(
            403,
            f"memtap proxy: refused a request for Host {shown!r} (a web page's host name may "
            f"point at this machine); if clients reach the proxy by that name, start it with "
            f"--allow-host {shown}",
        )

    def _check_origin(self, value: str) -> None:
        try:
            if normalize_origin(value) in self.allow_origins:
                return
        except ValueError:
            pass
        shown = _shown(value.strip())
        hint = (
            f"; if you trust that page, start the proxy with --allow-origin {shown}"
            if shown != "null"
            else ""
        )
        raise Refused(403, f"memtap proxy: refused a request from the web page at {shown}{hint}")

    # -- tokens and entities -----------------------------------------------------------------

    def admit(self, headers: RawHeaders) -> Grant:
        """The grant of a request's token (every entity when no token is configured;
        :class:`Refused` with a 401 when the token is missing or wrong)."""
        if self.tokens is None:
            return EVERY_ENTITY
        presented = None
        for name, value in headers:
            if name == TOKEN_HEADER:
                presented = value
                break
        grant = self.tokens.match(presented)
        if grant is None:
            raise Refused(401, "memtap proxy: missing or wrong x-memtap-token header")
        return grant

    def claimed_entity(self, grant: Grant, headers: RawHeaders) -> str:
        """The entity a request acts as, from its ``x-memtap-entity`` header, else its
        grant's default entity, else the proxy's."""
        return _entity_header(headers) or grant.default_entity or self.default_entity

    def check_entity(self, grant: Grant, entity: str) -> None:
        """Raise :class:`Refused` (403) when ``grant`` may not act as ``entity``."""
        if grant.allows(entity):
            return
        raise Refused(
            403,
            f"memtap proxy: this token may not act as entity {_shown(entity)!r} (it is bound to "
            f"{grant.glob!r}); send an x-memtap-entity header matching it",
        )

    def bind(self, grant: Grant, attribution: Attribution, headers: RawHeaders) -> Attribution:
        """``attribution`` as ``grant`` lets the request act: with the grant's default entity
        when the request named none (:class:`Refused` when its entity is not the grant's)."""
        if grant.every_entity:
            return attribution
        if (
            grant.default_entity is not None
            and attribution.entity_id == self.default_entity
            and _entity_header(headers) is None
        ):
            attribution = attrs.evolve(attribution, entity_id=grant.default_entity)
        self.check_entity(grant, attribution.entity_id)
        return attribution


def _entity_header(headers: RawHeaders) -> str | None:
    """The first ``x-memtap-entity`` header's value, unless it is absent or blank."""
    for name, value in headers:
        if name == ENTITY_HEADER:
            return value.decode("latin-1").strip() or None
    return None
