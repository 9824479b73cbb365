"""Where the memory browser listens unless told otherwise: shared by ``memtap ui`` and
:func:`memtap_ui.server.serve` / :func:`~memtap_ui.server.start`, and light to import (the
command line lists ``memtap ui`` without importing the web application)."""

from __future__ import annotations

#: Default listening address and port.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8097
