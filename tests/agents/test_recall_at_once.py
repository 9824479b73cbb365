"""A fact said now is recalled by the agent's next session a second later (issue 34, item 6):
docs/proxy.md's recipe, `claude -p "My favourite colour is teal."` then a new
`claude -p "What is my favourite colour?"` (and the same with `codex exec`), through the
proxy, with nothing flushed or warmed in between: the second request's memory block holds
what the first one said."""

from __future__ import annotations

import time

from agents_support import ClaudeCode, Codex, codex_session, memory_blocks, result_of
from test_claude_code import messages_requests, said
from test_codex import item_key, responses_requests

from memtap.testing.server import Reply, ScriptedModelServer

#: How long after the first run the second one starts (the user typing the next command).
LATER = 1.0


def wait_until(moment: float) -> None:
    """Let the user's second between the two commands pass (the scenario's own delay, not
    a wait for memtap: nothing is flushed)."""
    time.sleep(max(0.0, moment - time.monotonic()))


def test_claude_code_recalls_a_fact_said_a_second_before_in_a_new_session(
    claude: ClaudeCode, upstream: ScriptedModelServer
) -> None:
    upstream.script(Reply(text="Noted: teal."), Reply(text="Teal."))
    first = result_of(claude.prompt("My favourite colour is teal."))
    wait_until(time.monotonic() + LATER)
    second = result_of(claude.prompt("What is my favourite colour?"))

    assert first["session_id"] != second["session_id"]
    body = messages_requests(upstream)[-1]
    assert "teal" in memory_blocks(body), body
    assert "teal" not in said(body)  # recalled, not carried as a turn of this session
    assert second["result"] == "Teal."


def test_codex_recalls_a_fact_said_a_second_before_in_a_new_session(
    codex: Codex, upstream: ScriptedModelServer
) -> None:
    upstream.script(Reply(text="Noted: teal."), Reply(text="Teal."))
    first = codex_session(codex.exec("My favourite colour is teal.").check())
    wait_until(time.monotonic() + LATER)
    second = codex_session(codex.exec("What is my favourite colour?").check())

    assert first != second
    body = responses_requests(upstream)[-1]
    assert "teal" in memory_blocks(body), body
    assert "teal" not in "\n".join(item_key(i) for i in body["input"])
