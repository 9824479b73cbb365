"""Store URLs: recognising them, memtap's ``schema=`` parameter, and hiding passwords."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from memtap.sdk import StoreError
from memtap.sdk import redact_url as _redact_url

#: URL schemes this backend answers.
SCHEMES = ("postgresql", "postgres")

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``)."""
    scheme, colon, rest = url.partition(":")
    return bool(colon) and scheme.lower() in SCHEMES and rest.startswith("//")


def redact_url(url: str) -> str:
    """``url`` with its password and secret parameters (``password=``...) replaced by
    ``***`` (for messages and ``repr``): :func:`memtap.redact.redact_url`."""
    return _redact_url(url)


def take_param(url: str, name: str) -> tuple[str, str | None]:
    """Take memtap's query parameter ``name`` out of ``url`` (libpq would reject it):
    the URL without it and its value (the last one given), or ``None``. Raises
    :class:`StoreError` for a URL that cannot be parsed."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise StoreError(f"bad PostgreSQL store URL {redact_url(url)}: {exc}") from exc
    values = [v for k, v in query if k == name]
    if not values:
        return url, None
    kept = [(k, v) for k, v in query if k != name]
    return urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote))), values[-1]


def split_schema(url: str) -> tuple[str, str | None]:
    """Take memtap's ``schema=NAME`` query parameter out of ``url`` (libpq would reject it).

    Returns the libpq URI (with ``options=-csearch_path=NAME`` added when a schema is given)
    and the schema name. Raises :class:`StoreError` for a malformed schema name.
    """
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise StoreError(f"bad PostgreSQL store URL {redact_url(url)}: {exc}") from exc
    schema = None
    kept = []
    for key, value in query:
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if schema is None:
        return url, None
    if not _SCHEMA_NAME.match(schema):
        raise StoreError(
            f"bad schema name {schema!r} in store URL {redact_url(url)}: use letters, digits and "
            "underscores, starting with a letter or underscore (at most 63 characters)"
        )
    options = [v for k, v in kept if k == "options"]
    kept = [(k, v) for k, v in kept if k != "options"]
    kept.append(("options", " ".join([*options, f"-csearch_path={schema}"])))
    return urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote))), schema
