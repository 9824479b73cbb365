"""What the agent profiles read in their agents' own traffic: session ids and scaffolding,
checked on requests recorded from the real agents (Claude Code 2.1.332, Codex CLI 0.171,
Gemini CLI 0.61)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memtap.formats.scaffolding import TaggedScaffolding, is_side_call, own_messages
from memtap.protocol.model import Message
from memtap.protocol.wire import RequestView
from memtap_agents import CLAUDE_CODE, CODEBUDDY, CODEX, GEMINI_CLI, GENERIC
from memtap_agents.profiles import CUT_MEMO_CHARS
from memtap_agents.traffic import claude_code_session, codex_session, gemini_cli_side_call

GOLDEN = Path(__file__).parents[2] / "contrib" / "proxy" / "golden"


def golden(name: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A recorded request: its headers and body."""
    headers = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    return headers, json.loads((GOLDEN / f"{name}.json").read_bytes())


def texts(content: Any) -> list[str]:
    """The text parts of a message's content."""
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]


def user_messages(body: dict[str, Any], key: str) -> list[Message]:
    """The body's user messages as canonical messages (text parts joined by a line break, as
    the wire protocols read them)."""
    return [
        Message(role="user", content="\n".join(texts(m["content"])))
        for m in body[key]
        if isinstance(m, dict) and m.get("role") == "user" and texts(m.get("content"))
    ]


# -- sessions --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["claude_code_first", "claude_code_continue"])
def test_claude_code_names_its_session_in_a_header_and_in_metadata(name: str) -> None:
    headers, body = golden(name)
    session = headers["x-claude-code-session-id"]
    assert CLAUDE_CODE.session_id(headers, body) == session
    # Without the header, metadata.user_id (a JSON string since 2.1) says the same.
    assert json.loads(body["metadata"]["user_id"])["session_id"] == session
    assert CLAUDE_CODE.session_id({}, body) == session


def test_claude_code_older_user_id_form() -> None:
    body = {"metadata": {"user_id": "user_ab12_account_c3d4_session_5f1e2a7c-0000-4000-8000-000000000001"}}
    assert claude_code_session({}, body) == "5f1e2a7c-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"metadata": {"user_id": "user_without_session"}},
        {"metadata": {"user_id": "{not json"}},
        {"metadata": 3},
    ],
)
def test_claude_code_without_a_session_names_none(body: dict[str, Any]) -> None:
    assert claude_code_session({}, body) is None


@pytest.mark.parametrize("name", ["codex_first", "codex_resume"])
def test_codex_names_its_thread_in_a_header_and_in_the_body(name: str) -> None:
    headers, body = golden(name)
    session = headers["session-id"]
    assert CODEX.session_id(headers, body) == session
    assert body["client_metadata"]["session_id"] == body["prompt_cache_key"] == session
    assert CODEX.session_id({}, body) == session
    assert codex_session({}, {"prompt_cache_key": session}) == session


def test_codex_and_claude_code_sessions_are_the_same_across_turns() -> None:
    assert CLAUDE_CODE.session_id(*golden("claude_code_first")) == CLAUDE_CODE.session_id(
        *golden("claude_code_continue")
    )
    assert CODEX.session_id(*golden("codex_first")) == CODEX.session_id(*golden("codex_resume"))


def test_session_ids_are_bounded_and_trimmed() -> None:
    assert claude_code_session({"x-claude-code-session-id": "  abc  "}, {}) == "abc"
    assert len(codex_session({"session-id": "x" * 1000}, {}) or "") == 200
    assert codex_session({"session-id": "   "}, {}) is None


def test_generic_and_codebuddy_read_no_session() -> None:
    headers, body = golden("claude_code_first")
    assert GENERIC.session_id(headers, body) is None  # an unknown agent's session is derived
    assert GENERIC.keeps_conversation is False
    assert CODEBUDDY.session_id(*golden("claude_code_first")) is None
    assert CODEBUDDY.keeps_conversation is False
    assert CLAUDE_CODE.keeps_conversation and CODEX.keeps_conversation


# -- scaffolding ------------------------------------------------------------------------------


def test_claude_code_user_text_is_the_prompt_alone() -> None:
    _, body = golden("claude_code_continue")
    own = own_messages(CLAUDE_CODE, user_messages(body, "messages"))
    assert [m.content for m in own] == [
        "Read notes.txt and tell me what it says.",
        "What did I ask you first?",
    ]


def test_codex_user_text_is_the_prompt_alone() -> None:
    _, body = golden("codex_resume")
    own = own_messages(CODEX, user_messages(body, "input"))
    # The AGENTS.md + environment message was nothing but scaffolding: it is left out.
    assert [m.content for m in own] == [
        "Read notes.txt and tell me what it says.",
        "What did I ask you first?",
    ]


def test_scaffolding_anywhere_in_a_message_is_cut_and_the_rest_kept() -> None:
    text = (
        "<system-reminder>\nplan mode\n</system-reminder>\nfix the bug in <b>app.py</b>\n\n"
        '<ide_selection path="a.py">x = 1</ide_selection>\nplease'
    )
    assert (
        CLAUDE_CODE.user_text(Message(role="user", content=text)) == "fix the bug in <b>app.py</b>\n\nplease"
    )


def test_unclosed_or_foreign_tags_are_the_users() -> None:
    for text in ("<system-reminder> I typed this", "<environment_context> mine", "a < b and c > d"):
        assert CLAUDE_CODE.user_text(Message(role="user", content=text)) == text
        assert CODEX.user_text(Message(role="user", content=text)) == text


def test_codex_agents_md_block_goes_with_its_heading() -> None:
    text = "# AGENTS.md instructions for /p\n\n<INSTRUCTIONS>\nUse pytest.\n</INSTRUCTIONS>\nhello"
    assert CODEX.user_text(Message(role="user", content=text)) == "hello"


def test_assistant_messages_and_clean_texts_are_kept_as_they_are() -> None:
    messages = (
        Message(role="user", content="plain words"),
        Message(role="assistant", content="<system-reminder>quoted</system-reminder>"),
    )
    assert own_messages(CLAUDE_CODE, messages) is messages  # nothing to cut: the same tuple
    assert own_messages(GENERIC, messages) is messages  # a profile without user_text


def test_tool_results_lose_their_reminders_and_stay() -> None:
    tool = Message(
        role="tool", content="1\tdata\n<system-reminder>be careful</system-reminder>", tool_call_id="t"
    )
    assert own_messages(CLAUDE_CODE, [tool]) == (Message(role="tool", content="1\tdata", tool_call_id="t"),)
    only = Message(role="tool", content="<system-reminder>x</system-reminder>", tool_call_id="t")
    assert own_messages(CLAUDE_CODE, [only])[0].content == ""  # a result stays, even empty


def test_a_custom_profile_declares_its_own_scaffolding() -> None:
    mine = TaggedScaffolding(tags=["ctx"], headed=[("## Rules for ", "## End")])
    assert mine.cut("<ctx a='1'>x</ctx>hi ## Rules for me\nno\n## End") == "hi"


def test_a_profile_cuts_a_text_it_has_cut_before_and_a_long_one_the_same_way() -> None:
    """The cut of short texts is remembered (an agent resends its conversation every
    turn); a text over ``CUT_MEMO_CHARS`` is cut again each time, with the same result."""
    reminder = "<system-reminder>\nAs you answer, use the context.\n</system-reminder>\n"
    short = Message("user", reminder + "my favourite colour is teal")
    long = Message("user", reminder + "x" * CUT_MEMO_CHARS)
    for _ in range(2):
        assert CLAUDE_CODE.user_text(short) == "my favourite colour is teal"
        assert CLAUDE_CODE.user_text(long) == "x" * CUT_MEMO_CHARS
    plain = Message("user", "no scaffolding here")
    assert CLAUDE_CODE.user_text(plain) is plain.content


# -- Gemini CLI -------------------------------------------------------------------------------


def gemini_system(body: dict[str, Any]) -> str:
    """The text of a Gemini body's system instruction."""
    return "".join(p.get("text", "") for p in body["systemInstruction"]["parts"])


def gemini_user_messages(body: dict[str, Any]) -> list[Message]:
    """A Gemini body's user Contents with text as canonical messages (parts joined by a
    line break, as memtap-google reads them)."""
    out = []
    for content in body["contents"]:
        parts = [p["text"] for p in content["parts"] if isinstance(p.get("text"), str)]
        if content.get("role") == "user" and parts:
            out.append(Message(role="user", content="\n".join(parts)))
    return out


def gemini_view(body: dict[str, Any]) -> RequestView:
    """What the Gemini wire protocol reads of a body: its system instruction and user turns."""
    return RequestView(system=gemini_system(body), messages=gemini_user_messages(body))


def test_gemini_cli_is_known_by_its_prompt_and_its_side_calls_by_its_headers() -> None:
    for name in ("gemini_cli_first", "gemini_cli_resume"):
        headers, body = golden(name)
        assert GEMINI_CLI.detect(gemini_system(body))
        assert not is_side_call(GEMINI_CLI, gemini_view(body), headers, body)
    headers, router = golden("gemini_cli_router")
    assert not GEMINI_CLI.detect(gemini_system(router))  # the router's prompt is its own
    assert GEMINI_CLI.detect_headers(headers)
    assert is_side_call(GEMINI_CLI, gemini_view(router), headers, router)
    assert not GEMINI_CLI.detect_headers(golden("claude_code_first")[0])
    assert not CLAUDE_CODE.detect_headers(headers) and not is_side_call(
        CLAUDE_CODE, gemini_view(router), headers, router
    )


def test_gemini_cli_names_no_session_and_resends_its_conversation() -> None:
    assert GEMINI_CLI.session_id(*golden("gemini_cli_resume")) is None
    assert GEMINI_CLI.keeps_conversation


def test_gemini_cli_user_text_is_the_prompt_alone() -> None:
    _, body = golden("gemini_cli_resume")
    own = own_messages(GEMINI_CLI, gemini_user_messages(body))
    assert [m.content for m in own] == [
        "Read notes.txt and tell me what it says.",
        "What did I ask you first?",
    ]
    assert "session_context" in json.dumps(body) and "pytest" in json.dumps(body)  # GEMINI.md was there


MAIN_PROMPT = {"parts": [{"text": "You are Gemini CLI, an autonomous CLI agent specializing in software..."}]}
LEGACY_PROMPT = {
    "parts": [{"text": "You are a non-interactive CLI agent specializing in software engineering tasks."}]
}
#: (body, whether Gemini CLI sent it as a side call)
GEMINI_CALLS = [
    ({"systemInstruction": MAIN_PROMPT, "contents": []}, False),
    ({"systemInstruction": LEGACY_PROMPT, "contents": []}, False),
    ({"system_instruction": LEGACY_PROMPT}, False),
    ({"systemInstruction": "You are Gemini CLI, an interactive CLI agent specializing in..."}, False),
    ({"systemInstruction": MAIN_PROMPT, "generationConfig": {"temperature": 1}}, False),
    # structured answers: the model router, next-speaker and loop checks
    ({"systemInstruction": MAIN_PROMPT, "generationConfig": {"responseMimeType": "application/json"}}, True),
    (
        {"systemInstruction": MAIN_PROMPT, "generationConfig": {"responseJsonSchema": {"type": "OBJECT"}}},
        True,
    ),
    ({"systemInstruction": MAIN_PROMPT, "generation_config": {"response_schema": {"type": "OBJECT"}}}, True),
    # prompts of their own: summaries, sub-agents, none at all
    ({"systemInstruction": {"parts": [{"text": "You are the component that summarizes..."}]}}, True),
    ({"systemInstruction": {"parts": {"text": "You are **Codebase Investigator**."}}}, True),
    ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, True),
]


@pytest.mark.parametrize(("body", "side"), GEMINI_CALLS)
def test_gemini_cli_side_calls_are_told_from_its_conversation(body: dict[str, Any], side: bool) -> None:
    assert gemini_cli_side_call({"user-agent": "GeminiCLI/0.61.0/gemini-2.5-flash"}, body) is side


@pytest.mark.parametrize(
    ("agent", "known"),
    [
        ("GeminiCLI/0.61.0/gemini-2.5-flash (linux; x64)", True),
        ("GeminiCLI-tui/0.61.0/gemini-3.1-pro-preview (linux; x64; terminal)", True),
        ("google-genai-sdk/1.30.0 gl-node/v20.20.2", False),
        ("claude-cli/2.1.332", False),
        ("", False),
    ],
)
def test_gemini_cli_is_known_by_its_user_agent(agent: str, known: bool) -> None:
    assert GEMINI_CLI.detect_headers({"user-agent": agent}) is known
