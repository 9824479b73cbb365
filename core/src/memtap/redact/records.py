"""Redacting memtap's records: an exchange (messages, tool-call arguments, system text,
error, metadata) and a fact."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import attrs

from memtap.protocol.model import Exchange, Fact, Message
from memtap.redact.structures import _FLAGGED, _collect_text, _scan_many, _scanned
from memtap.redact.text import redact_text


def _redactor(texts: Iterable[str]) -> Callable[[str], str] | None:
    """``text -> text redacted`` for ``texts``: those not scanned before are scanned together,
    in one joined scan (a record's few short texts each cost a scan's fixed price otherwise),
    the others come from the cache of scanned texts. ``None`` when none of them has a secret
    (the usual case: the caller has nothing to rebuild)."""
    pending: dict[str, None] = {}
    found = 0
    for text in texts:
        found |= _collect_text(text, pending)
    results: dict[str, str] = {}
    if pending:
        _scan_many(list(pending), results)
    if not results and not found & _FLAGGED:
        return None
    return functools.partial(_scanned, results=results)


def _redact_message(m: Message, redacted: Callable[[str], str]) -> Message:
    content = redacted(m.content)
    calls = m.tool_calls
    if calls:
        calls = tuple(
            c if (arguments := redacted(c.arguments)) is c.arguments else attrs.evolve(c, arguments=arguments)
            for c in calls
        )
    if content is m.content and all(a is b for a, b in zip(calls, m.tool_calls)):
        return m
    return attrs.evolve(m, content=content, tool_calls=calls)


def _redact_metadata(
    metadata: dict[str, str], redacted: Callable[[str], str] = redact_text
) -> dict[str, str]:
    out = {k: redacted(v) for k, v in metadata.items()}
    return metadata if all(out[k] is v for k, v in metadata.items()) else out


def redact_exchange(exchange: Exchange) -> Exchange:
    """The exchange with secrets removed from its messages (text and tool-call arguments,
    which are JSON text: the redaction is escape-aware), system text, error and metadata.
    The same object when there was nothing to remove."""
    messages = (*exchange.input, *exchange.output)
    texts = [m.content for m in messages]
    texts += [c.arguments for m in messages for c in m.tool_calls]
    texts += [t for t in (exchange.system, exchange.error) if t]
    texts += exchange.metadata.values()
    redacted = _redactor(texts)
    if redacted is None:
        return exchange
    inputs = tuple(_redact_message(m, redacted) for m in exchange.input)
    outputs = tuple(_redact_message(m, redacted) for m in exchange.output)
    system = redacted(exchange.system) if exchange.system else exchange.system
    error = redacted(exchange.error) if exchange.error else exchange.error
    metadata = _redact_metadata(exchange.metadata, redacted)
    if (
        system is exchange.system
        and error is exchange.error
        and metadata is exchange.metadata
        and all(a is b for a, b in zip(inputs, exchange.input))
        and all(a is b for a, b in zip(outputs, exchange.output))
    ):
        return exchange
    return attrs.evolve(exchange, input=inputs, output=outputs, system=system, error=error, metadata=metadata)


def redact_fact(fact: Fact) -> Fact:
    """The fact with secrets removed from its text and metadata (the same object when
    there were none)."""
    text = redact_text(fact.text)
    metadata = _redact_metadata(fact.metadata)
    if text is fact.text and metadata is fact.metadata:
        return fact
    return attrs.evolve(fact, text=text, metadata=metadata)
