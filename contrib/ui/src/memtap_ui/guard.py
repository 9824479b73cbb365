"""Who may see and change memory through the UI.

Every request passes :class:`UIGuard` (an ASGI middleware) before a page is read:

- **token** (``--token``): when set, every request must carry it: the ``x-memtap-token``
  header, ``Authorization: Bearer <token>``, or the login cookie. Opening any page with
  ``?token=<token>`` sets that cookie (``HttpOnly``, ``SameSite=Strict``, scoped to the UI's
  path) and redirects to the same page without the token in its address.
- **host** (no token): the UI answers only requests for a loopback name or address
  (``localhost``, ``127.0.0.1``...), the address it is bound to or an allowed host name, so
  that a web page whose host name resolves to 127.0.0.1 (DNS rebinding) cannot read it.
- **writes**: a ``POST`` must come from the UI's own pages: ``Sec-Fetch-Site``, when sent,
  must be ``same-origin``; ``Origin``, else ``Referer``, when sent, must be the UI's own
  origin. The form's CSRF token (:meth:`UIGuard.csrf_token`) is checked by the page that
  handles it, so that a request passing one check but not the other deletes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from memtap.sdk.server import host_name, is_loopback_host

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The login cookie's name (its value is derived from the token, not the token itself).
COOKIE = "memtap_ui"
TOKEN_HEADER = b"x-memtap-token"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def check_bind(host: str, token: str | None) -> None:
    """Refuse (``ValueError``) to serve beyond loopback without a token."""
    if not is_loopback_host(host) and not token:
        raise ValueError(
            f"refusing to serve the memory browser on {host}: anyone who can reach it could read "
            f"and delete your memory. Bind 127.0.0.1 (the default) or set --token."
        )


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url`` (lower case, default port left out), or ``None``."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is None or port == _DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def _headers(scope: Scope) -> dict[bytes, str]:
    """The request's headers (first of each name), values decoded as latin-1."""
    out: dict[bytes, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name, value.decode("latin-1"))
    return out


async def _send_page(send: Send, status: int, text: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    body = (
        "<!doctype html><meta charset=utf-8><title>memtap</title>"
        f"<p>{text}</p>"  # the caller's fixed text: nothing a client sent
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class UIGuard:
    """The UI's admission rules (see the module's docstring), wrapping the pages' app.

    ``token`` is required from every request when set; ``bound_host`` is the address the UI
    listens on and ``allow_hosts`` more host names it may be reached by (without a token).
    ``form_key`` keys the forms' CSRF token: processes serving the same UI (``memtap proxy
    --workers N --ui``) share one, so that a form one served is taken by another; by
    default a random key of this process.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        bound_host: str | None = None,
        allow_hosts: Iterable[str] = (),
        form_key: bytes | None = None,
    ) -> None:
        self.app = app
        self.token = token or None
        hosts = {host_name(h) for h in allow_hosts}
        if bound_host:
            hosts.add(host_name(bound_host))
        self.allow_hosts = frozenset(hosts)
        self._secret = form_key or secrets.token_bytes(32)
        self._cookie = self._derive(b"cookie") if self.token else ""

    def _derive(self, what: bytes) -> str:
        key = self.token.encode() if self.token else self._secret
        return hmac.new(key, b"memtap-ui:" + what, hashlib.sha256).hexdigest()

    def csrf_token(self) -> str:
        """The value the forget forms carry in their hidden ``csrf`` field (from ``form_key``)."""
        return hmac.new(self._secret, b"memtap-ui:csrf", hashlib.sha256).hexdigest()

    def valid_csrf(self, value: object) -> bool:
        """Whether a form's ``csrf`` field is :meth:`csrf_token`."""
        return isinstance(value, str) and hmac.compare_digest(value.encode(), self.csrf_token().encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point: refuse, log in, or pass the request on."""
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = _headers(scope)
        scope.setdefault("state", {})["memtap_ui_guard"] = self
        if self.token is None and not self._host_allowed(headers.get(b"host", "")):
            return await _send_page(
                send,
                403,
                "memtap UI: refused a request for a host name that is not this machine's "
                "(start <code>memtap ui</code> with <code>--token</code> to serve other names).",
            )
        if self.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if "token" in query and scope["method"] in ("GET", "HEAD"):
                return await self._login(scope, send, query)
            if not self._authenticated(headers):
                return await _send_page(
                    send,
                    401,
                    "memtap UI: this memory browser needs its token. Open the address "
                    "<code>memtap ui</code> printed, ending in <code>?token=...</code>.",
                )
        if scope["method"] not in ("GET", "HEAD") and not self.same_origin(scope, headers):
            return await _send_page(
                send, 403, "memtap UI: refused a change sent from another web page; nothing was deleted."
            )
        await self.app(scope, receive, send)

    def _host_allowed(self, host: str) -> bool:
        name = host_name(host)
        # No Host (HTTP/1.0) is not something a browser sends.
        return not name or name in self.allow_hosts or is_loopback_host(name)

    def _authenticated(self, headers: dict[bytes, str]) -> bool:
        assert self.token is not None
        presented = headers.get(TOKEN_HEADER)
        auth = headers.get(b"authorization", "")
        if presented is None and auth[:7].lower() == "bearer ":
            presented = auth[7:].strip()
        if presented is not None:
            return hmac.compare_digest(presented.encode(), self.token.encode())
        for part in headers.get(b"cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value.encode(), self._cookie.encode()):
                return True
        return False

    async def _login(self, scope: Scope, send: Send, query: dict[str, str]) -> None:
        assert self.token is not None
        if not hmac.compare_digest(query["token"].encode(), self.token.encode()):
            return await _send_page(send, 401, "memtap UI: wrong token.")
        rest = {k: v for k, v in query.items() if k != "token"}
        root = scope.get("root_path", "")
        raw = scope.get("raw_path")
        path = raw.decode("latin-1") if raw else quote(scope.get("path", "/"))
        location = path + (f"?{urlencode(rest)}" if rest else "")
        cookie = f"{COOKIE}={self._cookie}; Path={root or '/'}; HttpOnly; SameSite=Strict"
        await _send_page(
            send,
            303,
            "memtap UI: logged in.",
            [(b"location", location.encode("latin-1", "replace")), (b"set-cookie", cookie.encode())],
        )

    def same_origin(self, scope: Scope, headers: dict[bytes, str] | None = None) -> bool:
        """Whether a request comes from the UI's own pages, as far as the browser says
        (``Sec-Fetch-Site``, ``Origin``, ``Referer``); a client that sends none of them (not a
        browser) passes, and still needs the form's CSRF token."""
        headers = _headers(scope) if headers is None else headers
        site = headers.get(b"sec-fetch-site")
        if site is not None and site != "same-origin":
            return False
        own = origin_of(f"{scope.get('scheme', 'http')}://{headers.get(b'host', '')}")
        origin = headers.get(b"origin")
        if origin is not None:
            return own is not None and origin_of(origin) == own
        referer = headers.get(b"referer")
        if referer is not None:
            return own is not None and origin_of(referer) == own
        return True
