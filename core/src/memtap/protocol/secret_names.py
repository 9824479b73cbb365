"""The names secrets go by: which keys hold one (:func:`key_kind`), and a URL for display
with the values under such names masked (:func:`redact_url`).

Depends on nothing of memtap: redaction's detectors judge ``key = value`` by these names,
and storage shows store URLs with them masked without depending on redaction.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = ["URL_MASK", "key_kind", "redact_url"]

#: What a password or secret parameter is replaced with in a URL shown to a person.
URL_MASK = "***"

_PASSWORD_KEYS = re.compile(r"(?:passw(?:or)?d|pwd|passphrase|(?:^|[_.-])pass)$")
_HEADER_KEYS = re.compile(r"authorization$")
_COOKIE_KEYS = re.compile(r"cookie$")
_RANDOM_KEYS = re.compile(r"(?:key|secret|token|auth|credentials?|sig|signature)$")
#: Keys ending like secrets whose values are not (ids, hashes, pagination).
_NOT_SECRET_KEYS = re.compile(
    r"public|cache|hash|sort|primary|foreign|partition|idempot|dedup|page|next|checksum"
)


def key_kind(key: str) -> str | None:
    """How a value assigned to ``key`` is judged: ``"password"`` (any real value),
    ``"header"`` (an ``Authorization`` header's whole value), ``"cookies"`` (a ``Cookie``
    or ``Set-Cookie`` header's whole value, when a cookie in it holds a session-like
    value), ``"random"`` (a value that looks machine-made), or ``None`` (not a secret's
    name)."""
    k = key.lower().strip("\"'`-")
    if _PASSWORD_KEYS.search(k):
        return "password"
    if _HEADER_KEYS.search(k):
        return "header"
    if _COOKIE_KEYS.search(k):
        return "cookies"
    if _RANDOM_KEYS.search(k) and not _NOT_SECRET_KEYS.search(k):
        return "random"
    return None


def redact_url(url: str) -> str:
    """``url`` for display: the password of its user info and the values of secret query
    parameters (``password=``, ``token=``, ``sslpassword=``...) replaced by :data:`URL_MASK`.
    A URL that cannot be parsed keeps only its scheme."""
    try:
        parts = urlsplit(url)
        password = parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        scheme = url.split(":", 1)[0] if ":" in url else ""
        return f"{scheme}://{URL_MASK}" if scheme.isalnum() else URL_MASK
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{URL_MASK}@{hostport}"
    secret_params = [key for key, value in query if value and key_kind(key) is not None]
    if password is None and not secret_params:
        return url
    new_query = parts.query
    if secret_params:
        masked = [(k, URL_MASK if v and key_kind(k) is not None else v) for k, v in query]
        new_query = urlencode(masked, quote_via=quote, safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=new_query))
