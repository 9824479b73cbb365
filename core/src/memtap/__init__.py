"""memtap: long-term memory for any LLM application, without changing its code.

::

    import memtap
    mem = memtap.Memory()          # DuckDB file under $MEMTAP_HOME, or $MEMTAP_STORE
    mem.register(client)           # an OpenAI/Anthropic/... client: calls now have memory
    with mem.scope(entity_id="alice", session_id="s1"):
        client.chat.completions.create(...)
"""

from __future__ import annotations

from ._version import __version__
from .errors import MemtapError, StoreError, UnknownStoreURLError, UnsupportedClientError
from .history import HistoryBudget
from .hookspecs import hookimpl
from .memorize import LiteLLMPort
from .memory import Memory
from .model import (
    Attribution,
    Exchange,
    Fact,
    Message,
    ScoredFact,
    SessionInfo,
    ToolCall,
    Usage,
)
from .recall_plugin import RecallBudget
from .redact import guard_loggers as _guard_loggers

_guard_loggers()  # no secret in memtap's log records (plugins' loggers: when a Memory starts)

__all__ = [
    "Attribution",
    "Exchange",
    "Fact",
    "HistoryBudget",
    "LiteLLMPort",
    "Memory",
    "MemtapError",
    "Message",
    "RecallBudget",
    "ScoredFact",
    "SessionInfo",
    "StoreError",
    "ToolCall",
    "UnknownStoreURLError",
    "UnsupportedClientError",
    "Usage",
    "__version__",
    "hookimpl",
]
