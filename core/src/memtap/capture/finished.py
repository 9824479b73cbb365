"""The capture step: a finished call, as the request path hands it over, becomes the
exchange to store.

The request path (:class:`memtap.request.tap.Call`) makes a :class:`FinishedCall`, a plain
record of what capture needs (protocol, attribution, the app's body, the response or the
stream's events, what was injected, the call's span), and hands it to :func:`captured`;
nothing in capture calls back into the request path. :func:`captured` journals the call
to the spool at once (durable before the call returns) and defers the rest to whoever
asks first, the writer or the history cache: :func:`format_finished` formats it (the
stream accumulated, the payload hooks: format, then redact) and :func:`complete_record`
adds what only the stored record needs (the record of what was injected) and ends the
call's span.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from memtap import telemetry
from memtap.capture.accumulation import stream_accumulator
from memtap.capture.explanation import with_injected
from memtap.capture.spool import RequestJournal, Spool, journal_call
from memtap.capture.writer import CapturedCall
from memtap.protocol.anchors import AgentProfile, detect_profile
from memtap.protocol.model import Attribution, Exchange
from memtap.protocol.wire import InjectionPlan, RawExchange, RequestView, ResponseView, WireProtocol

if TYPE_CHECKING:
    import pluggy

__all__ = ["FinishedCall", "captured", "complete_record", "format_finished"]

log = logging.getLogger("memtap.capture.finished")

#: A response or stream event as JSON (``None``: one the SDK could not convert).
Json = Mapping[str, Any] | None


# Not frozen: a frozen attrs class sets each field through object.__setattr__, and this one
# is made on the request path of every call (measured: 7.8 µs against 2.4 µs). Nothing
# changes it once made.
@attrs.define(eq=False)
class FinishedCall:
    """One finished call, as the request path hands it to capture.

    The answer is read lazily, off the request path: ``response`` returns a non-streamed
    response's JSON, ``events`` a stream's events (each converted once, whoever asks
    first: the spool or the formatter). ``already_present`` counts the request's leading
    messages that resend its session, unless ``resent_later`` still has counts to make
    (where the call is formatted). ``profile`` is the call's agent profile when
    ``profile_known``; else it is looked for among ``profiles`` (by ``agent``'s name, or
    the request's system prompt) when the call is formatted.
    """

    protocol: WireProtocol
    attribution: Attribution
    id: str
    #: The body as the application built it (``None``: the SDK never reached the tap's
    #: prepare step and no fallback body was given; nothing is stored).
    request_body: Mapping[str, Any] | None
    #: The request as injection read it (the agent's scaffolding left out), if it was.
    request_view: RequestView | None
    started_at: _dt.datetime
    ended_at: _dt.datetime
    #: The end of the call in ``time.time_ns()`` (the span's end time).
    ended_ns: int
    #: The call's span, ended by :func:`complete_record`.
    span: Span
    response: Callable[[], Json] | None = None
    events: Callable[[], Sequence[Json]] | None = None
    error: str | None = None
    partial: bool = False
    already_present: int = 0
    resent_later: tuple[Callable[[], int], ...] = ()
    #: What was injected (``None``: the app's own body was sent).
    injection: InjectionPlan | None = None
    profile: AgentProfile | None = None
    profile_known: bool = True
    profiles: Sequence[AgentProfile] = ()
    agent: str | None = None
    #: The request half of the call's spool record, made while the call was in flight.
    journal: RequestJournal | None = None

    @property
    def stream(self) -> bool:
        """Whether the answer was streamed."""
        return self.events is not None

    def answer(self) -> tuple[Json, list[Json] | None]:
        """The answer as the spool journals it: the response, or the stream's events."""
        if self.events is not None:
            return None, [event for event in self.events() if event is not None]
        return (self.response() if self.response is not None else None), None


def _settled(call: FinishedCall) -> int:
    """How many of the request's messages resend its session, the counts left to be made
    made now (fail open: a count that cannot be made counts nothing, and the request's
    messages are captured)."""
    present = call.already_present
    for count_resent in call.resent_later:
        try:
            present = max(present, count_resent())
        except Exception:
            log.warning("memtap could not tell what a request resends; capturing it whole", exc_info=True)
    return present


def _profile(call: FinishedCall, body: Mapping[str, Any]) -> AgentProfile | None:
    """The profile whose scaffolding the capture leaves out: the one injection used,
    else (a call that never reached the prepare step) found as it would have been."""
    if call.profile_known or not call.profiles:
        return call.profile
    return detect_profile(call.profiles, call.protocol.read_request(body).system, name=call.agent)


def _read(call: FinishedCall, hook: pluggy.HookRelay) -> tuple[Json, ResponseView | None]:
    """The response's JSON, or what the stream said (accumulated now)."""
    if call.events is None:
        return (call.response() if call.response is not None else None), None
    acc = stream_accumulator(hook, call.protocol)
    for event in call.events():
        if event is not None:
            acc.feed(event)
    return None, acc.result()


def format_finished(call: FinishedCall, hook: pluggy.HookRelay) -> Exchange | None:
    """``call`` formatted by the payload hooks (``hook``: a plugin manager's; the default
    formatter, then the redacting wrapper), its messages as stored; ``None`` when there is
    nothing to store."""
    body = call.request_body
    if body is None:
        return None
    # Counted here, off the request path: the calls it compares with are formatted by then.
    present = _settled(call) if call.resent_later else call.already_present
    response, stream_result = _read(call, hook)
    raw = RawExchange(
        protocol=call.protocol,
        attribution=call.attribution,
        request_body=body,
        response=response,
        stream_result=stream_result,
        already_present=present,
        started_at=call.started_at,
        ended_at=call.ended_at,
        stream=call.stream,
        error=call.error,
        partial=call.partial,
        id=call.id,
        profile=_profile(call, body),
        request_view=call.request_view,
    )
    exchange: Exchange | None
    if not call.span.is_recording():
        exchange = hook.memtap_format_exchange(raw=raw)
        return exchange
    parent = trace.set_span_in_context(call.span)
    with telemetry.tracer().start_as_current_span("memtap.capture.writer", context=parent):
        exchange = hook.memtap_format_exchange(raw=raw)
    return exchange


def complete_record(call: FinishedCall, exchange: Exchange | None) -> Exchange | None:
    """What only the stored record needs: the record of what was injected, the span's
    attributes and status; the call's span ends here, whatever happens."""
    # Done by the writer, never on the path of a later call that reads this one's
    # messages for its history.
    try:
        if exchange is not None:
            exchange = with_injected(exchange, call.injection)
            if call.span.is_recording():
                call.span.set_attributes(telemetry.exchange_attributes(exchange))
        if call.error is not None:
            call.span.set_status(Status(StatusCode.ERROR, call.error))
        return exchange
    finally:
        call.span.end(end_time=call.ended_ns)


def captured(call: FinishedCall, hook: pluggy.HookRelay, spool: Spool | None) -> CapturedCall:
    """``call`` as the writer takes it: journaled to ``spool`` now (durable before the call
    returns: a ``kill -9`` right after loses nothing), formatted and completed later."""
    item = CapturedCall(
        functools.partial(format_finished, call, hook),
        call.attribution,
        finish=functools.partial(complete_record, call),
    )
    if spool is not None and call.request_body is not None:
        item.segment = journal_call(
            spool,
            call,
            call.request_body,
            call.ended_at,
            call.answer,
            error=call.error,
            partial=call.partial,
            stream=call.stream,
        )
    return item
