"""Spans of a registered client's calls: recorded ones carry memtap's child spans and the
response's attributes; a call whose span is not recorded (no SDK, or not sampled) costs
none of that work, and is captured all the same."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import memtap
from memtap import telemetry
from memtap.storage.store import InMemoryStore


def test_a_call_not_recorded_makes_no_child_spans_and_no_attributes(
    client: openai.OpenAI,
    mem: memtap.Memory,
    store: InMemoryStore,
    memtap_spans: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []
    real = telemetry.exchange_attributes
    monkeypatch.setattr(telemetry, "exchange_attributes", lambda ex: made.append(ex) or real(ex))
    with mem.scope(entity_id="alice", session_id="s1"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "first question"}])
        assert mem.flush()
        names = {s.name for s in memtap_spans.get_finished_spans()}
        assert {"memtap.inject", "memtap.capture.writer"} <= names and len(made) == 1
        memtap_spans.clear()
        made.clear()
        unsampled = SpanContext(trace_id=1, span_id=1, is_remote=False, trace_flags=TraceFlags(0))
        with trace.use_span(NonRecordingSpan(unsampled)):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "second one"}])
        assert mem.flush()
    assert list(memtap_spans.get_finished_spans()) == [] and made == []
    _, second = sorted(store.exchanges(), key=lambda e: e.started_at)
    assert second.input[-1].content == "second one" and second.output
    assert second.injected[0].turns[0].content == "first question"  # the record is kept
