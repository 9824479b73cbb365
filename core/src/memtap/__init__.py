"""memtap: long-term memory for any LLM application, without changing its code.

::

    import memtap
    mem = memtap.Memory()          # DuckDB file under $MEMTAP_HOME, or $MEMTAP_STORE
    mem.register(client)           # an OpenAI/Anthropic/... client: calls now have memory
    with mem.scope(entity_id="alice", session_id="s1"):
        client.chat.completions.create(...)
"""

from __future__ import annotations

from memtap._version import __version__
from memtap.errors import (
    ForkedMemoryError,
    MemtapError,
    StoreError,
    UnknownStoreURLError,
    UnsupportedClientError,
)
from memtap.history.injector import HistoryBudget
from memtap.hookspecs import hookimpl
from memtap.longterm.memorize import LiteLLMPort
from memtap.longterm.recall_injector import RecallBudget
from memtap.memory import Memory
from memtap.protocol.model import (
    Attribution,
    Exchange,
    ExplainedFact,
    Explanation,
    Fact,
    InjectedBlock,
    Message,
    ScoredFact,
    SessionInfo,
    ToolCall,
    Usage,
)
from memtap.redact import guard_loggers as _guard_loggers

_guard_loggers()  # no secret in memtap's log records (plugins' loggers: when a Memory starts)

__all__ = [
    "Attribution",
    "Exchange",
    "ExplainedFact",
    "Explanation",
    "Fact",
    "ForkedMemoryError",
    "HistoryBudget",
    "InjectedBlock",
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


def __dir__() -> list[str]:
    """``dir(memtap)`` lists the public API, not the rooms its import loaded."""
    return sorted(__all__)
