"""Serving ``memtap mcp --http`` under uvicorn, stopping cleanly on SIGTERM."""

from __future__ import annotations

from typing import Any

import uvicorn

from memtap.sdk import StopOnSignal


class StoppingServer(StopOnSignal, uvicorn.Server):
    """uvicorn's server, returning from :meth:`run` on SIGTERM as on SIGINT (requests under
    way finish), so that the caller closes its Memory and the command exits 0
    (``memtap.sdk.StopOnSignal``, as the proxy's server). A second signal forces the stop."""


def serve_http(app: Any, *, host: str, port: int) -> None:
    """Serve the ASGI ``app`` on ``host:port`` until SIGTERM or SIGINT."""
    StoppingServer(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
