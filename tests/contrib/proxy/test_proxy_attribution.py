"""The attribution rule, case by case (memtap_proxy.attribution; through the proxy with the
real agents' requests in test_proxy_agents.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memtap.protocol.model import Message
from memtap.protocol.wire import RequestView
from memtap_agents import CLAUDE_CODE, CODEBUDDY, GENERIC
from memtap_proxy.attribution import DERIVED_PREFIX, DerivedSessions, attribute, derived_session

CLAUDE_BODY = {"metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s-agent"}'}}
VIEW = RequestView(messages=[Message(role="user", content="hello"), Message(role="assistant", content="hi")])


def attributed(headers: dict[str, str], body: dict[str, Any], profile: Any, session: str | None = None):
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    return attribute(
        raw,
        body,
        VIEW,
        profile,
        agent=getattr(profile, "name", "generic"),
        entity_id="default",
        session_id=session,
        process_id=None,
    )


@pytest.mark.parametrize(
    ("headers", "profile", "configured", "session", "source", "history"),
    [
        ({"X-Memtap-Session": "mine"}, CLAUDE_CODE, "desk", "mine", "header", True),
        ({}, CLAUDE_CODE, "desk", "s-agent", "agent", False),  # Claude Code resends it all
        ({}, CODEBUDDY, "desk", "desk", "config", True),  # names none
        ({}, GENERIC, None, derived_session("generic", VIEW), "derived", False),
        ({}, None, None, derived_session("generic", VIEW), "derived", False),
    ],
)
def test_the_session_rule(headers, profile, configured, session, source, history) -> None:
    found = attributed(headers, CLAUDE_BODY, profile, configured)
    assert (found.attribution.session_id, found.session_source, found.history) == (session, source, history)


def test_headers_set_entity_and_process_and_are_bounded() -> None:
    found = attributed({"x-memtap-entity": " alice ", "x-memtap-process": "p" * 500}, {}, GENERIC)
    assert found.attribution.entity_id == "alice"
    assert found.attribution.process_id == "p" * 200


def test_a_profile_may_name_the_entity() -> None:
    class Team:
        name = "team"

        def entity_id(self, headers: dict[str, str], body: dict[str, Any]) -> str | None:
            return headers.get("x-team-user")

    assert attributed({"x-team-user": "bob"}, {}, Team()).attribution.entity_id == "bob"
    assert (
        attributed({"x-memtap-entity": "eve", "x-team-user": "bob"}, {}, Team()).attribution.entity_id
        == "eve"
    )
    assert attributed({}, {}, Team()).attribution.entity_id == "default"


def test_a_derived_session_is_the_conversations() -> None:
    first = derived_session("generic", RequestView(messages=[Message(role="user", content="hello")]))
    assert first.startswith(DERIVED_PREFIX)
    assert derived_session("generic", VIEW) == first  # the same conversation, resent
    other = RequestView(messages=[Message(role="user", content="hello there")])
    assert derived_session("generic", other) != first
    assert derived_session("codex", RequestView(messages=VIEW.messages)) != first  # per agent


def _conversation(*texts: str) -> RequestView:
    roles = ("user", "assistant")
    return RequestView(messages=[Message(role=roles[i % 2], content=t) for i, t in enumerate(texts)])


@pytest.mark.parametrize(
    "boilerplate",
    [
        (),
        ("Rename foo() to bar().", "Renamed."),
        ("Example 1", "Ok.", "Example 2", "Ok.", "New code base.", "Ok."),
    ],
)
def test_derived_sessions_tell_a_conversation_from_its_boilerplate(boilerplate: tuple[str, ...]) -> None:
    derived = DerivedSessions()
    one = derived.session("generic", _conversation(*boilerplate, "We deploy on Fridays."))
    two = derived.session("generic", _conversation(*boilerplate, "The database is heron."))
    assert one != two and one.startswith(DERIVED_PREFIX)
    later = _conversation(*boilerplate, "We deploy on Fridays.", "Noted.", "When?", "Fridays.", "Thanks.")
    assert derived.session("generic", later) == one
    assert derived.session("codex", _conversation(*boilerplate, "We deploy on Fridays.")) != one  # per agent
    if not boilerplate:  # a conversation that opens with its user's words: as before
        assert one == derived_session("generic", _conversation("We deploy on Fridays."))


def test_derived_sessions_are_bounded_and_found_again_after_being_forgotten() -> None:
    derived = DerivedSessions(size=2)
    first = derived.session("generic", _conversation("a"))
    for text in ("b", "c", "d"):
        derived.session("generic", _conversation(text))
    resent = _conversation("a", "x", "y")
    again = derived.session("generic", resent)  # forgotten: named after the newest prefix
    assert again != first
    assert derived.session("generic", _conversation("a", "x", "y", "z", "w")) == again
