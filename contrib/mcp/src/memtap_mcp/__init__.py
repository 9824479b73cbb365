"""memtap's long-term memory as MCP tools: ``memtap mcp --store URL [--entity E] [--http]``.

::

    memtap mcp --store duckdb:///path/memtap.duckdb --entity alice      # stdio
    claude mcp add memtap -- memtap mcp --entity alice                   # Claude Code

Tools: ``remember(entity_id, text)``, ``recall(entity_id, query, k)``,
``forget(entity_id, fact_id=None)``, ``history(entity_id, session_id)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import EntityRules, build_server, http_app

__all__ = ["EntityRules", "build_server", "http_app"]


def __getattr__(name: str) -> Any:
    # Imported on first use: every Memory imports this package's plugin module, and the
    # MCP SDK takes a while to import.
    if name in __all__:
        from . import server

        return getattr(server, name)
    raise AttributeError(name)
