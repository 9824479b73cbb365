"""memtap as a local HTTP proxy: memory for any agent (Claude Code, Codex, apps in any
language) by changing one base URL.

::

    memtap proxy --anthropic-upstream https://api.anthropic.com --openai-upstream https://api.openai.com
    export ANTHROPIC_BASE_URL=http://127.0.0.1:8096
    export OPENAI_BASE_URL=http://127.0.0.1:8096/v1
"""

from __future__ import annotations

from .app import Proxy
from .config import ProxyConfig
from .server import ProxyThread, open_memory, serve
from .sse import SSEEvent, SSEParser

__all__ = ["Proxy", "ProxyConfig", "ProxyThread", "SSEEvent", "SSEParser", "open_memory", "serve"]
