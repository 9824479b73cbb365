"""PostgreSQL errors turned into :class:`memtap.StoreError` messages that say what to do."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from memtap.sdk import StoreError, redact_text
from memtap.sdk.storage import RecordRefusedError

from .urls import redact_url

#: SQLSTATEs worth retrying a whole transaction for (deadlock, serialization failure).
RETRYABLE = frozenset({"40P01", "40001"})


def _where(url: str) -> tuple[str, str, str]:
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost (Unix socket)"
        port = str(parts.port or 5432)
        user = parts.username or "(your login name)"
    except ValueError:
        host, port, user = "?", "?", "?"
    return host, port, user


def advice(url: str, detail: str) -> str:
    """What to do about a connection or server error whose text is ``detail``."""
    host, port, user = _where(url)
    lowered = detail.lower()
    missing_db = re.search(r'database "([^"]+)" does not exist', detail)
    if missing_db:
        name = missing_db.group(1)
        return (
            f"database {name!r} does not exist on {host}:{port}: create it "
            f"(`createdb -h {host} -p {port} {name}`) or name an existing database in the URL"
        )
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return (
            f"authentication failed for user {user!r}: check the user and password in the URL "
            "(or PGPASSWORD / ~/.pgpass) and the server's pg_hba.conf"
        )
    if re.search(r'role "[^"]+" does not exist', detail):
        return f"user {user!r} does not exist on the server: create it or use another user in the URL"
    if "permission denied" in lowered:
        return f"user {user!r} lacks a privilege memtap needs (create tables and a schema): grant it"
    if any(
        s in lowered
        for s in (
            "connection refused",
            "could not connect",
            "timeout expired",
            "no route",
            "connection failed",
        )
    ):
        return (
            f"no PostgreSQL server answers at {host}:{port}: start it (e.g. `pg_ctlcluster "
            "<version> main start`) or fix the host and port in the URL"
        )
    if "could not translate host name" in lowered or "name or service not known" in lowered:
        return f"host {host!r} is unknown: fix the host in the URL"
    if "server closed the connection" in lowered or "terminating connection" in lowered:
        return "the server closed the connection (restarted or stopped?); memtap retries when it is back"
    return "check the URL and that the server is reachable"


def store_error(url: str, action: str, exc: BaseException, *, refused: bool = False) -> StoreError:
    """A :class:`StoreError` for ``action`` failing with ``exc`` (a
    :class:`RecordRefusedError` when ``refused``: the records' fault, not the server's)."""
    detail = redact_text(" ".join(str(exc).split())) or type(exc).__name__
    if refused:
        return RecordRefusedError(f"PostgreSQL store {redact_url(url)}: {action} failed: {detail}")
    return StoreError(
        f"PostgreSQL store {redact_url(url)}: {action} failed: {advice(url, detail)}. ({detail})"
    )
