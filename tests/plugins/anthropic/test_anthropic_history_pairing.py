"""Whatever the session and however the app sends its next request, the Messages body memtap
sends passes Anthropic's tool-pairing validation (issue #13, item 1): stored sessions with
answered and unanswered tool rounds, app requests resending everything, a window, only the
new question, or only results answering a stored call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memtap.formats.anthropic_messages import write_message
from memtap.history.conversation import HistoryBudget, leading_results, plan_history
from memtap.protocol.model import Message
from memtap.protocol.wire import InjectionPlan
from memtap.testing.sessions import Round, SessionScript
from memtap.testing.validation import check_anthropic_messages
from memtap_anthropic.messages import AnthropicMessagesProtocol

PROTOCOL = AnthropicMessagesProtocol()
WIDE = HistoryBudget(max_messages=10_000, max_tokens=10_000_000)

_rounds = st.lists(st.builds(Round, st.integers(1, 3), st.booleans(), st.booleans()), max_size=2)
_turns = st.lists(st.tuples(_rounds, st.booleans()), min_size=1, max_size=8)


def wire_request(messages: Sequence[Message]) -> dict[str, Any]:
    """The app's request as it would send it: one wire message per message, a tool round's
    results together in one user message."""
    out: list[dict[str, Any]] = []
    for m in messages:
        wire = write_message(m)
        assert wire is not None
        if out and m.role == "tool" and _is_results(out[-1]):
            blocks = [*_blocks(out[-1]["content"]), *_blocks(wire["content"])]
            out[-1] = {"role": wire["role"], "content": blocks}
        else:
            out.append(wire)
    return {"model": "claude", "max_tokens": 64, "messages": out}


def _is_results(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and all(b.get("type") == "tool_result" for b in content)


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


@settings(max_examples=300, deadline=None)
@given(turns=_turns, cache=st.integers(12, 60), window=st.integers(0, 40))
def test_every_app_style_gets_a_body_anthropic_accepts(turns, cache, window):
    session = SessionScript()
    for rounds, closing in turns:
        session.turn(rounds, closing)
    history = session.stored[-cache:]
    cached = {c.id for m in history for c in m.tool_calls}
    for style in ["everything", "window", "results" if session.pending_calls() else "new"]:
        request, new = session.next_request("everything" if style == "window" else style)
        body = wire_request(request)
        if style == "window":  # the app's last `window` wire messages, and the new one
            body["messages"] = body["messages"][-window - 1 :]
        view = PROTOCOL.read_request(body)
        if not leading_results(view.messages) <= cached:
            continue  # the request answers a call memtap no longer caches
        plan = plan_history(history, view.messages, WIDE)
        sent = PROTOCOL.inject(body, InjectionPlan(history=plan.messages, already_present=plan.present))
        rejection = check_anthropic_messages(sent)
        assert rejection is None, rejection.message
        assert list(view.messages[plan.present :]) == new
