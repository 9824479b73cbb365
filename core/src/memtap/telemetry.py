"""OpenTelemetry: spans for LLM calls (gen_ai semantic conventions) and for memory work.

memtap only uses the OpenTelemetry API. Without an SDK configured every span is a no-op;
with one (``opentelemetry-sdk``), spans go wherever the application exports them. Message
content is recorded only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is
true (from the redacted exchange), and never any header or key: exception messages and
tracebacks put on spans are redacted too.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Sequence
from typing import Any

from opentelemetry import metrics, trace

from memtap._version import __version__
from memtap.protocol.model import Exchange, Message
from memtap.redact import redact_text

TRACER_NAME = "memtap"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


# A proxy until the application sets its tracer provider, then that provider's tracer: safe
# to create once, at import.
_TRACER = trace.get_tracer(TRACER_NAME, __version__)


def tracer() -> trace.Tracer:
    """memtap's tracer (follows the global tracer provider, even one set later)."""
    return _TRACER


def meter() -> metrics.Meter:
    """memtap's meter, for outcome counters."""
    return metrics.get_meter(TRACER_NAME, __version__)


def capture_content() -> bool:
    """Whether message content may be put on spans (off unless the env var says true)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def _messages_json(messages: Sequence[Message]) -> str:
    return json.dumps(
        [
            {"role": m.role, "content": m.content}
            | ({"tool_calls": [{"id": c.id, "name": c.name} for c in m.tool_calls]} if m.tool_calls else {})
            for m in messages
        ],
        ensure_ascii=False,
    )


def exchange_attributes(exchange: Exchange) -> dict[str, Any]:
    """gen_ai attributes describing a finished call (response side)."""
    attrs: dict[str, Any] = {"gen_ai.conversation.id": exchange.attribution.session_id}
    if exchange.response_model:
        attrs["gen_ai.response.model"] = exchange.response_model
    if exchange.usage.input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = exchange.usage.input_tokens
    if exchange.usage.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = exchange.usage.output_tokens
    if exchange.finish_reasons:
        attrs["gen_ai.response.finish_reasons"] = list(exchange.finish_reasons)
    if capture_content():
        attrs["gen_ai.input.messages"] = _messages_json(exchange.input)
        attrs["gen_ai.output.messages"] = _messages_json(exchange.output)
    return attrs


def record_exception(span: trace.Span, exc: BaseException) -> None:
    """``span.record_exception(exc)`` with the message and traceback redacted (an SDK's
    error may quote the request, a provider's may echo a key)."""
    stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    span.record_exception(
        exc,
        attributes={
            "exception.message": redact_text(str(exc)),
            "exception.stacktrace": redact_text(stack),
        },
    )
