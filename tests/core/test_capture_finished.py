"""The capture step on its own: a FinishedCall, made without any request path, becomes the
stored exchange (formatted, redacted, with its injected record) and ends the call's span."""

from __future__ import annotations

import time

from memtap import telemetry
from memtap.capture.finished import FinishedCall, captured
from memtap.formats.openai_chat import ChatFormatProtocol
from memtap.memory import plugin_manager
from memtap.protocol.model import Attribution, Message, utcnow
from memtap.protocol.wire import InjectionPlan

SECRET = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90"


class _Chat(ChatFormatProtocol):
    name = "test.chat"
    provider = "test"


def _finished(**fields: object) -> FinishedCall:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "earlier turn, resent"},
            {"role": "user", "content": f"my key is {SECRET}"},
        ],
    }
    given: dict[str, object] = {
        "protocol": _Chat(),
        "attribution": Attribution(entity_id="alice", session_id="s1"),
        "id": "call-1",
        "request_body": body,
        "request_view": None,
        "started_at": utcnow(),
        "ended_at": utcnow(),
        "ended_ns": time.time_ns(),
        "span": telemetry.tracer().start_span("chat"),
    }
    given.update(fields)
    return FinishedCall(**given)  # type: ignore[arg-type]


def test_a_finished_call_is_formatted_redacted_recorded_and_its_span_ended(memtap_spans) -> None:
    plan = InjectionPlan(history=[Message(role="user", content="injected turn")])
    response = {"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"}}]}
    call = _finished(response=lambda: response, already_present=1, injection=plan)
    item = captured(call, plugin_manager(entry_points=False).hook, None)
    assert memtap_spans.get_finished_spans() == ()  # formatting waits for the writer
    exchange = item.exchange()
    assert exchange is not None
    assert [m.content for m in exchange.input] == ["my key is [REDACTED]"]
    assert [m.content for m in exchange.output] == ["noted"]
    assert [block.kind for block in exchange.injected] == ["history"]
    spans = {span.name: span for span in memtap_spans.get_finished_spans()}
    assert spans.keys() == {"chat", "memtap.capture.writer"}  # formatting traced under the call
    assert spans["memtap.capture.writer"].parent.span_id == spans["chat"].context.span_id
    assert spans["chat"].end_time == call.ended_ns


def test_a_stream_is_accumulated_and_its_resend_counted_when_formatted(memtap_spans) -> None:
    counted: list[int] = []

    def resent() -> int:
        counted.append(1)
        return 1

    events = [
        {"model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "no"}}]},
        None,  # an event the SDK could not convert is left out
        {"model": "m", "choices": [{"index": 0, "delta": {"content": "ted"}, "finish_reason": "stop"}]},
    ]
    call = _finished(events=lambda: events, resent_later=(resent,), error="Boom: it broke", partial=True)
    item = captured(call, plugin_manager(entry_points=False).hook, None)
    assert counted == []  # not on the request path
    exchange = item.exchange()
    assert exchange is not None and counted == [1]
    assert exchange.stream and exchange.status == "error"
    assert [m.content for m in exchange.input] == ["my key is [REDACTED]"]
    assert [m.content for m in exchange.output] == ["noted"]
    spans = {span.name: span for span in memtap_spans.get_finished_spans()}
    assert not spans["chat"].status.is_ok


def test_a_call_without_a_body_stores_nothing_and_still_ends_its_span(memtap_spans) -> None:
    item = captured(_finished(request_body=None), plugin_manager(entry_points=False).hook, None)
    assert item.exchange() is None
    assert [span.name for span in memtap_spans.get_finished_spans()] == ["chat"]
