"""A local web browser for memtap's memory: entities, facts and their history, sessions,
what memtap injected into each captured call and why, a recall playground, and forgetting.

::

    memtap ui --store duckdb:///path/to/memtap.duckdb      # http://127.0.0.1:8097/
    memtap proxy --ui ...                                   # the same under /_memtap/

or from the app holding the store (a DuckDB file can be open in one process only)::

    import memtap_ui
    server = memtap_ui.start(mem, port=8097)   # a background thread; server.stop()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .guard import UIGuard
    from .server import UIServer, serve, start

__all__ = ["UIGuard", "UIServer", "create_app", "serve", "start"]

#: Where each public name lives, imported on first use: every ``Memory`` imports this
#: package (its plugin module, for ``memtap ui``), and Starlette costs time to import.
_MODULES = {
    "create_app": ".app",
    "UIGuard": ".guard",
    "UIServer": ".server",
    "serve": ".server",
    "start": ".server",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
