"""What the agents say about themselves in their own traffic: session ids and scaffolding.

Measured on the agents' real requests (Claude Code 2.1.x, Codex CLI 0.171, Gemini CLI
0.61, Qwen Code 0.24.4, opencode 1.18.33, aider 0.86.2); see ``docs/proxy.md``
(Attribution) for the rule per agent.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from memtap.sdk import Message, TaggedScaffolding

#: Session ids longer than this are cut (an id is a UUID; a longer one is not trusted).
MAX_ID = 200


def _clean_id(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()[:MAX_ID]
    return value or None


def claude_code_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Claude Code's session: the ``X-Claude-Code-Session-Id`` header, else
    ``metadata.user_id`` — a JSON string ``{"device_id":…,"account_uuid":…,"session_id":…}``
    since 2.1, ``user_<hash>_account_<uuid>_session_<uuid>`` before. ``--continue`` and
    ``--resume`` keep the session's id; a new ``claude -p`` has a new one."""
    found = _clean_id(headers.get("x-claude-code-session-id"))
    if found:
        return found
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    if not isinstance(user_id, str):
        return None
    if user_id.startswith("{"):
        try:
            data = json.loads(user_id)
        except ValueError:
            return None
        return _clean_id(data.get("session_id")) if isinstance(data, dict) else None
    if "_session_" in user_id:
        return _clean_id(user_id.rsplit("_session_", 1)[1])
    return None


def codex_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Codex's session (its thread): the ``session-id`` header (``session_id`` /
    ``conversation_id`` in older versions), else ``client_metadata.session_id``, else
    ``prompt_cache_key`` (Codex sets it to the same id). ``codex exec resume`` keeps it."""
    for name in ("session-id", "session_id", "conversation_id"):
        found = _clean_id(headers.get(name))
        if found:
            return found
    metadata = body.get("client_metadata")
    if isinstance(metadata, Mapping):
        found = _clean_id(metadata.get("session_id"))
        if found:
            return found
    return _clean_id(body.get("prompt_cache_key"))


#: Claude Code's scaffolding inside user and tool messages: reminders (CLAUDE.md, git
#: status, attribution, todo lists, file-change notes...), IDE context, and the wrappers of
#: local slash commands and their output. Its ``{"role": "system"}`` message is system
#: text to begin with (memtap-anthropic reads it so).
CLAUDE_CODE_SCAFFOLDING = TaggedScaffolding(
    tags=(
        "system-reminder",
        "ide_opened_file",
        "ide_selection",
        "ide_diagnostics",
        "local-command-stdout",
        "local-command-stderr",
        "local-command-caveat",
        "command-message",
        "command-name",
        "command-args",
        "bash-input",
        "bash-stdout",
        "bash-stderr",
        "task-notification",
    ),
)
#: Codex's "contextual" user messages: the environment, AGENTS.md and other instructions,
#: shell commands the user ran, aborted turns, notifications. Its developer items are
#: system text (memtap-openai reads them so).
CODEX_SCAFFOLDING = TaggedScaffolding(
    tags=(
        "environment_context",
        "user_instructions",
        "INSTRUCTIONS",
        "user_shell_command",
        "turn_aborted",
        "subagent_notification",
        "skill",
        "skills_instructions",
        "permissions instructions",
    ),
    headed=(("# AGENTS.md instructions for ", "</INSTRUCTIONS>"),),
)


def _text(content: Any) -> str:
    """A chat message's text: a string, or its text parts joined by line breaks (as the
    wire protocols read them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def _first_user_text(body: Mapping[str, Any]) -> str | None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for m in messages:
        if isinstance(m, Mapping) and m.get("role") == "user":
            return _text(m.get("content"))
    return None


def _digest(prefix: str, *parts: str) -> str:
    seed = "\0".join(parts).encode("utf-8", "replace")
    return prefix + hashlib.blake2b(seed, digest_size=8).hexdigest()


def opencode_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """opencode's session: the ``x-session-id`` header (``ses_…``), the same for every
    request of one session, its title call included; ``opencode run --continue`` and
    ``--session`` keep it."""
    return _clean_id(headers.get("x-session-id")) or _clean_id(headers.get("x-session-affinity"))


#: Qwen Code's startup context (date, operating system, working directory and its files),
#: a reminder in the first user message of every request of one session.
_QWEN_CONTEXT = re.compile(
    r"<system-reminder>\s*This is the Qwen Code\. We are setting up the context.*?</system-reminder>",
    re.DOTALL,
)


def qwen_code_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """Qwen Code's session. Qwen Code sends no id (no header, no body field), but every
    request of a session, ``--continue`` and ``--resume`` included, resends its first
    user message: what the user typed and the startup context reminder (date, working
    directory). The session is named after both; its other reminders (skills, date
    notes) move between requests and are left out."""
    first = _first_user_text(body)
    return None if first is None else _qwen_code_session_of(first)


@functools.lru_cache(maxsize=256)
def _qwen_code_session_of(first: str) -> str:
    # Remembered: every request of a session resends its first message (9 kB of
    # reminders), and cutting them costs more than the rest of the request path.
    context = _QWEN_CONTEXT.search(first)
    typed = QWEN_CODE_SCAFFOLDING.cut(first)
    return _digest("qwen-", context.group(0) if context else "", typed)


#: Qwen Code's scaffolding in user messages: reminders (skills, startup context, deferred
#: tools, the current date), as Claude Code's.
QWEN_CODE_SCAFFOLDING = TaggedScaffolding(tags=("system-reminder",))
#: What an agent no profile knows may wrap around its user's words (the agents' tags
#: measured so far): cut conservatively by the generic profile.
GENERIC_SCAFFOLDING = TaggedScaffolding(
    tags=(
        "system-reminder",
        "environment_context",
        "environment_details",
        "user_instructions",
        "ide_opened_file",
        "ide_selection",
    ),
)


def chat_messages(body: Mapping[str, Any]) -> tuple[Message, ...]:
    """A Chat Completions body's user and assistant messages, their texts only (what a
    session reader needs of them)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ()
    return tuple(
        Message(role=m["role"], content=_text(m.get("content")))
        for m in messages
        if isinstance(m, Mapping) and m.get("role") in ("user", "assistant")
    )


#: Gemini CLI's scaffolding in its first user turn: the environment (date, OS, folders) with
#: the GEMINI.md files it loaded, hook output, and the snapshot that replaces a compressed
#: history.
GEMINI_CLI_SCAFFOLDING = TaggedScaffolding(
    tags=(
        "session_context",
        "loaded_context",
        "global_context",
        "extension_context",
        "project_context",
        "hook_context",
        "state_snapshot",
    ),
)
#: What the system instruction of Gemini CLI's own conversation opens with, whatever the
#: model and mode ("You are Gemini CLI, an autonomous CLI agent specializing in software
#: engineering tasks", "You are a non-interactive CLI agent specializing in...", for
#: Gemini 2.5). Its side calls have prompts of their own: the model router, next-speaker
#: and loop checks, summaries, sub-agents.
GEMINI_CLI_FINGERPRINTS = ("You are Gemini CLI", "CLI agent specializing in software engineering tasks")
#: How Gemini CLI's ``User-Agent`` starts (``GeminiCLI/0.61.0/<model> ...``, or
#: ``GeminiCLI-tui/...``), on its side calls too.
GEMINI_CLI_AGENT = "GeminiCLI"


def is_gemini_cli(headers: Mapping[str, str]) -> bool:
    """Whether a request comes from Gemini CLI (its ``User-Agent``)."""
    return headers.get("user-agent", "").startswith(GEMINI_CLI_AGENT)


def _system_text(body: Mapping[str, Any]) -> str:
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, str):
        return system
    parts = system.get("parts") if isinstance(system, Mapping) else None
    if isinstance(parts, Mapping):
        parts = [parts]
    texts = (p.get("text") for p in parts or () if isinstance(p, Mapping))
    return "".join(t for t in texts if isinstance(t, str))


def _asks_for_json(body: Mapping[str, Any]) -> bool:
    config = body.get("generationConfig") or body.get("generation_config")
    if not isinstance(config, Mapping):
        return False
    mime = config.get("responseMimeType") or config.get("response_mime_type")
    schema = any(config.get(k) for k in ("responseJsonSchema", "responseSchema", "response_schema"))
    return mime == "application/json" or schema


def gemini_cli_side_call(headers: Mapping[str, str], body: Mapping[str, Any]) -> bool:
    """Whether a Gemini CLI request is one of its side calls, not the user's conversation:
    a structured (JSON) answer asked for (the model router's complexity score, the
    next-speaker and loop checks), or a system instruction other than the agent's own
    (summaries, sub-agents)."""
    head = _system_text(body)[:4096]
    return _asks_for_json(body) or not any(f in head for f in GEMINI_CLI_FINGERPRINTS)
