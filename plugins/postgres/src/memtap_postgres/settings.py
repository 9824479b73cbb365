"""Connection deadlines: how long memtap waits for PostgreSQL before it gives up.

Each setting comes from the store URL, else the environment, else memtap's default:

- connect timeout: URL ``connect_timeout`` (seconds), env ``PGCONNECT_TIMEOUT``, default 5;
- statement timeout: URL ``statement_timeout`` (seconds, ``0`` = off), env
  ``MEMTAP_PG_STATEMENT_TIMEOUT``, default 30;
- TCP keepalives: URL ``keepalives``, ``keepalives_idle``, ``keepalives_interval``,
  ``keepalives_count``; default on, 30 s idle, probes 10 s apart, 3 probes;
- unacknowledged data: URL ``tcp_user_timeout`` (ms), default 30000.

All but ``statement_timeout`` are libpq's own parameters, passed through as given; memtap
only fills in those the URL leaves out. ``statement_timeout`` is memtap's: the server
cancels a longer statement, and memtap closes a connection whose statement has had no
answer for that long plus :data:`WATCHDOG_GRACE` seconds — the one deadline that also holds
when the server or the network freezes while the connection stays open (a paused VM, a
stalled middlebox: keepalive probes are still answered, so TCP itself never notices).
Neither applies to schema migrations, which may rightly take longer.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from memtap.sdk import StoreError

#: Environment variable for the statement timeout (seconds).
STATEMENT_TIMEOUT_ENV = "MEMTAP_PG_STATEMENT_TIMEOUT"
#: libpq's own environment variable for the connect timeout.
CONNECT_TIMEOUT_ENV = "PGCONNECT_TIMEOUT"
#: Seconds past the statement timeout before memtap closes an unanswered connection.
WATCHDOG_GRACE = 5.0

#: libpq parameters memtap sets when the URL does not.
LIBPQ_DEFAULTS: dict[str, str] = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
DEFAULT_STATEMENT_TIMEOUT = 30.0


@attrs.frozen
class ConnectionSettings:
    """The deadlines of one store's connections (see the module docstring)."""

    #: libpq keyword arguments to add to the URL's own parameters.
    libpq: dict[str, str]
    #: Seconds after which the server cancels a statement (``None``: never).
    statement_timeout: float | None
    #: Seconds a connection may wait to be established.
    connect_timeout: float

    @property
    def watchdog_limit(self) -> float | None:
        """Seconds after which an unanswered statement's connection is closed."""
        return None if self.statement_timeout is None else self.statement_timeout + WATCHDOG_GRACE

    def session_options(self, url_options: str | None) -> dict[str, Any]:
        """Keyword arguments for pooled connections: the statement timeout joins the
        URL's own ``options`` (such as memtap's ``search_path`` for ``schema=``)."""
        if self.statement_timeout is None:
            return {}
        ms = max(1, round(self.statement_timeout * 1000))
        return {"options": " ".join(o for o in (url_options, f"-c statement_timeout={ms}") if o)}


def _seconds(value: str, where: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise StoreError(
            f"bad statement_timeout {value!r} in {where}: give seconds, e.g. 30 (0 turns it off)"
        )
    return seconds


def resolve_settings(url_params: dict[str, Any], statement_timeout: str | None) -> ConnectionSettings:
    """The settings for a URL whose libpq parameters are ``url_params`` and whose
    ``statement_timeout`` parameter (taken out of the URL) is ``statement_timeout``."""
    libpq = {k: v for k, v in LIBPQ_DEFAULTS.items() if k not in url_params}
    if os.environ.get(CONNECT_TIMEOUT_ENV):
        libpq.pop("connect_timeout", None)  # libpq reads its own variable
    if str(url_params.get("keepalives", "1")) == "0":
        for key in ("keepalives_idle", "keepalives_interval", "keepalives_count"):
            libpq.pop(key, None)
    connect = (
        url_params.get("connect_timeout")
        or os.environ.get(CONNECT_TIMEOUT_ENV)
        or libpq.get("connect_timeout", "5")
    )
    try:
        connect_timeout = float(connect)
    except ValueError:
        connect_timeout = float(LIBPQ_DEFAULTS["connect_timeout"])
    if statement_timeout is not None:
        seconds = _seconds(statement_timeout, "the store URL")
    elif os.environ.get(STATEMENT_TIMEOUT_ENV):
        seconds = _seconds(os.environ[STATEMENT_TIMEOUT_ENV], f"${STATEMENT_TIMEOUT_ENV}")
    else:
        seconds = DEFAULT_STATEMENT_TIMEOUT
    return ConnectionSettings(libpq=libpq, statement_timeout=seconds or None, connect_timeout=connect_timeout)
