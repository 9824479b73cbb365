"""memtap agent profiles: claude-code, codex, gemini-cli, qwen-code, opencode, aider,
codebuddy and the generic fallback (entry point ``agents`` in group ``memtap``)."""

from __future__ import annotations

from memtap import hookimpl
from memtap.sdk import AgentProfile

from .profiles import (
    AIDER,
    CLAUDE_CODE,
    CODEBUDDY,
    CODEX,
    GEMINI_CLI,
    GENERIC,
    OPENCODE,
    QWEN_CODE,
    MarkdownProfile,
    PlainProfile,
    XmlProfile,
)

__all__ = [
    "AIDER",
    "CLAUDE_CODE",
    "CODEBUDDY",
    "CODEX",
    "GEMINI_CLI",
    "GENERIC",
    "OPENCODE",
    "QWEN_CODE",
    "MarkdownProfile",
    "PlainProfile",
    "XmlProfile",
]


@hookimpl
def memtap_agent_profiles() -> list[AgentProfile]:
    """The known agents, most specific first; ``generic`` matches nothing by fingerprint."""
    return [CLAUDE_CODE, CODEX, GEMINI_CLI, QWEN_CODE, OPENCODE, AIDER, CODEBUDDY, GENERIC]
