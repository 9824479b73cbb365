"""Qwen Code, opencode and aider as their own traffic says (requests recorded from Qwen Code
0.24.4, opencode 1.18.33 and aider 0.86.2): sessions, side calls, what the user typed;
and what a request of an agent no profile knows looks like."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import memtap_agents
from memtap.formats.scaffolding import is_side_call, looks_like_agent, own_view
from memtap.protocol.model import Message
from memtap.protocol.wire import RequestView
from memtap.sdk import detect_profile
from memtap_agents import AIDER, OPENCODE, QWEN_CODE
from memtap_agents.profiles import QuotedPrompt
from memtap_agents.traffic import chat_messages

GOLDEN = Path(__file__).parents[2] / "contrib" / "proxy" / "golden"
TYPED = "My favourite colour is teal."


def golden(name: str) -> tuple[dict[str, str], dict[str, Any]]:
    headers = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    return headers, json.loads((GOLDEN / f"{name}.json").read_bytes())


PROFILES = memtap_agents.memtap_agent_profiles()


def chat_view(body: dict[str, Any]) -> RequestView:
    """A Chat Completions body as the wire protocol reads it: system messages as system
    text, text parts joined by line breaks."""
    system = "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")
    return RequestView(system=system, messages=chat_messages(body))


#: name -> (profile, side call, the user turns as typed)
RECORDED = {
    "qwen_code_first": (QWEN_CODE, False, [TYPED]),
    "qwen_code_continue": (QWEN_CODE, False, [TYPED, "What is my favourite colour?"]),
    "qwen_code_memory_extraction": (QWEN_CODE, True, None),
    "opencode_first": (OPENCODE, False, [TYPED]),
    "opencode_continue": (OPENCODE, False, [TYPED, "What is my favourite colour?"]),
    "opencode_title": (OPENCODE, True, None),
    "aider_first": (AIDER, False, [TYPED]),
    "aider_restored": (AIDER, False, [TYPED, "What is my favourite colour?"]),
    "aider_gpt4o_first": (AIDER, False, [TYPED]),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_each_recorded_request_is_read_as_its_agent_means_it(name: str) -> None:
    profile, side, typed = RECORDED[name]
    _, body = golden(name)
    view = chat_view(body)
    assert detect_profile(PROFILES, view.system) is profile
    assert is_side_call(profile, view) is side
    if typed is not None:
        own = own_view(profile, view)
        assert [m.content for m in own.messages if m.role == "user"] == typed
        assert all(m.content.strip() == m.content for m in own.messages)


@pytest.mark.parametrize(
    ("profile", "first", "later"),
    [
        (QWEN_CODE, "qwen_code_first", "qwen_code_continue"),
        (OPENCODE, "opencode_first", "opencode_continue"),
        (AIDER, "aider_first", "aider_restored"),
    ],
)
def test_a_session_is_the_same_across_its_requests_and_differs_for_other_words(profile, first, later) -> None:
    session = profile.session_id(*golden(first))
    assert session and session == profile.session_id(*golden(later))
    if profile is not OPENCODE:  # opencode names it in a header
        headers, body = golden(first)
        other = json.loads(json.dumps(body).replace(TYPED, "We deploy on Fridays."))
        assert profile.session_id(headers, other) not in (None, session)


@pytest.mark.parametrize(
    ("sent", "typed"),
    [
        ('"My favourite colour is teal."', "My favourite colour is teal."),
        ('"She said \\"hi\\" to me"', 'She said "hi" to me'),
        ("mem:status", "mem:status"),
        ('"mem:recall deploy days"', "mem:recall deploy days"),
        ('"two" "arguments"', '"two" "arguments"'),  # several quoted arguments: kept
        ('"', '"'),
        ("plain text", "plain text"),
    ],
)
def test_opencode_run_quotes_are_not_the_users(sent: str, typed: str) -> None:
    assert QuotedPrompt().cut(sent) == typed


AIDER_CONTEXT = [
    (
        "I have *added these files to the chat* so you can go ahead and edit them.\n\nsrc/app.py\n```\n```",
        "Ok, any changes I propose will be to those files.",
    ),
    (
        "Here are summaries of some files present in my git repository.\nsrc/app.py",
        "Ok, I won't try and edit those files without asking first.",
    ),
    (
        "Here are some READ ONLY files, provided for your reference.\nREADME.md",
        "Ok, I will use these files as references.",
    ),
    ("I am not sharing any files that you can edit yet.", "Ok."),
]
REMINDERS = [
    "\n\n# *SEARCH/REPLACE block* Rules:\n\nEvery *SEARCH/REPLACE block* must use this format:",
    "\n\nTo suggest changes to a file you MUST return the entire content of the updated file.",
    "\n\n# File editing rules:\n\nReturn edits similar to unified diffs",
    "",
]


@pytest.mark.parametrize("context", range(len(AIDER_CONTEXT)))
@pytest.mark.parametrize("reminder", REMINDERS)
@pytest.mark.parametrize("examples", [False, True])
def test_aider_frames_are_cut_whatever_it_shares(context: int, reminder: str, examples: bool) -> None:
    messages: list[Message] = []
    if examples:
        messages += [
            Message(role="user", content="Change the greeting to be more casual"),
            Message(role="assistant", content="Ok, I will:\n\n1. Switch the greeting."),
            Message(role="user", content=memtap_agents.aider.EXAMPLES_END),
            Message(role="assistant", content="Ok."),
        ]
    messages += [
        Message(role="user", content="We deploy on Fridays.  \n"),
        Message(role="assistant", content="\nNoted.\n\n"),
    ]
    user, reply = AIDER_CONTEXT[context]
    messages += [Message(role="user", content=user), Message(role="assistant", content=reply)]
    messages.append(Message(role="user", content="When do we deploy?" + reminder))
    own = AIDER.own_messages(messages)
    assert [(m.role, m.content) for m in own] == [
        ("user", "We deploy on Fridays."),
        ("assistant", "Noted."),
        ("user", "When do we deploy?"),
    ]


@pytest.mark.parametrize(
    ("body", "view", "agent"),
    [
        ({"tools": [{"type": "function"}]}, RequestView(), True),
        ({}, RequestView(system="x" * 3000), True),
        (
            {},
            RequestView(
                messages=[Message(role="user", content="<system-reminder>cwd</system-reminder>\nhi")]
            ),
            True,
        ),
        (
            {},
            RequestView(system="You are a helpful assistant.", messages=[Message(role="user", content="hi")]),
            False,
        ),
        (
            {"tools": []},
            RequestView(messages=[Message(role="assistant", content="<system-reminder>")]),
            False,
        ),
    ],
)
def test_what_looks_like_an_unknown_agent(body: dict[str, Any], view: RequestView, agent: bool) -> None:
    assert looks_like_agent(body, view) is agent
