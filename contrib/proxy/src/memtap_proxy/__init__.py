"""memtap as a local HTTP proxy: memory for any agent (Claude Code, Codex, apps in any
language) by changing one base URL.

::

    memtap proxy --anthropic-upstream https://api.anthropic.com --openai-upstream https://api.openai.com
    export ANTHROPIC_BASE_URL=http://127.0.0.1:8096
    export OPENAI_BASE_URL=http://127.0.0.1:8096/v1
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Proxy
    from .config import ProxyConfig
    from .server import ProxyThread, open_memory, serve
    from .sse import SSEEvent, SSEParser

__all__ = ["Proxy", "ProxyConfig", "ProxyThread", "SSEEvent", "SSEParser", "open_memory", "serve"]

#: Where each public name lives. Imported on first use: every ``Memory`` imports this
#: package (its plugin module, for ``memtap proxy``), and the server costs ~0.1 s to import.
_MODULES = {
    "Proxy": ".app",
    "ProxyConfig": ".config",
    "ProxyThread": ".server",
    "open_memory": ".server",
    "serve": ".server",
    "SSEEvent": ".sse",
    "SSEParser": ".sse",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
