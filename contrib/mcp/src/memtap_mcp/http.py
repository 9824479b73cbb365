"""Serving ``memtap mcp --http`` under uvicorn, stopping cleanly on SIGTERM."""

from __future__ import annotations

from types import FrameType
from typing import Any

import uvicorn


class StoppingServer(uvicorn.Server):
    """uvicorn's server, returning from :meth:`run` on SIGTERM as on SIGINT (requests under
    way finish), so that the caller closes its Memory and the command exits 0: uvicorn
    itself re-raises the signal once it has shut down, and the process died by it (rc -15,
    the Memory not closed). The proxy's server does the same
    (``memtap_proxy.server.ProxyServer``; this package does not depend on the proxy). A
    second signal forces the stop."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Note a stop request (uvicorn calls this from its signal handler)."""
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def serve_http(app: Any, *, host: str, port: int) -> None:
    """Serve the ASGI ``app`` on ``host:port`` until SIGTERM or SIGINT."""
    StoppingServer(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
