"""Turning model objects into column arrays for bulk inserts, and rows back into objects."""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from typing import Any

from memtap.model import Attribution, Exchange, Fact, Message, ToolCall, Usage
from memtap.storage import exchange_messages

_UTC = _dt.timezone.utc


def clean(text: str | None) -> str | None:
    """``text`` without NUL characters, which PostgreSQL text cannot hold (each becomes
    U+FFFD: one character changed instead of a batch refused forever)."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\ufffd")


def utc(value: _dt.datetime) -> _dt.datetime:
    """``value`` as an aware UTC datetime (naive values are taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=_UTC)
    return value.astimezone(_UTC)


def dump(value: Any) -> str | None:
    """JSON text of a non-empty value (``None`` for empty), NUL-free."""
    return clean(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) if value else None


def columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows turned into ``width`` column lists (one array parameter per column)."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows)]


def unique(items: Sequence[Any]) -> list[Any]:
    """``items`` without repeated ids; the first occurrence wins."""
    seen: dict[str, Any] = {}
    for item in items:
        seen.setdefault(item.id, item)
    return list(seen.values())


def exchange_rows(batch: Sequence[Exchange]) -> list[tuple[Any, ...]]:
    """One row per exchange (``seq`` is assigned by the database)."""
    rows = []
    for ex in batch:
        a, u = ex.attribution, ex.usage
        rows.append((
            ex.id, a.entity_id, a.session_id, a.process_id, ex.provider, ex.operation,
            ex.request_model, ex.response_model, clean(ex.system), ex.stream, ex.status,
            clean(ex.error), json.dumps(list(ex.finish_reasons)), u.input_tokens, u.output_tokens,
            u.cached_input_tokens, len(ex.input), utc(ex.started_at), utc(ex.ended_at),
            dump(ex.metadata),
        ))  # fmt: skip
    return rows


def message_rows(batch: Sequence[Exchange], seqs: dict[str, int]) -> list[tuple[Any, ...]]:
    """One row per message of the exchanges in ``seqs`` (those actually inserted)."""
    rows = []
    for ex in batch:
        seq = seqs.get(ex.id)
        if seq is None:
            continue
        a = ex.attribution
        for position, m in enumerate(exchange_messages(ex)):
            calls = [{"id": c.id, "name": c.name, "arguments": c.arguments, "type": c.type}
                     for c in m.tool_calls]  # fmt: skip
            rows.append((
                ex.id, seq, a.entity_id, a.session_id, position, m.role, clean(m.content),
                dump(calls), m.tool_call_id, m.name, utc(ex.started_at),
            ))  # fmt: skip
    return rows


def session_rows(fresh: Sequence[Exchange]) -> list[tuple[Any, ...]]:
    """One row per (entity, session): the earliest exchange's process id, the first and last
    start times; sorted by key so that concurrent upserts lock rows in one order."""
    found: dict[tuple[str, str], list[Any]] = {}
    for ex in fresh:
        a, at = ex.attribution, utc(ex.started_at)
        row = found.get((a.entity_id, a.session_id))
        if row is None:
            found[(a.entity_id, a.session_id)] = [a.entity_id, a.session_id, a.process_id, at, at]
            continue
        if at < row[3]:
            row[2], row[3] = a.process_id, at
        row[4] = max(row[4], at)
    return [tuple(found[key]) for key in sorted(found)]


def fact_rows(facts: Sequence[Fact]) -> list[tuple[Any, ...]]:
    """One row per fact (``seq`` is assigned by the database)."""
    return [
        (f.id, f.entity_id, f.process_id, clean(f.text), f.kind, f.source_exchange_id,
         f.supersedes, f.superseded_by, utc(f.created_at), dump(f.metadata))
        for f in facts
    ]  # fmt: skip


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if not raw:
        return ()
    data = json.loads(raw) if isinstance(raw, str) else raw
    return tuple(ToolCall(**call) for call in data)


def _metadata(raw: Any) -> dict[str, str]:
    if not raw:
        return {}
    data: dict[str, str] = json.loads(raw) if isinstance(raw, str) else raw
    return data


def message(row: Sequence[Any], *, stamped: bool) -> Message:
    """A message from ``role, content, tool_calls, tool_call_id, name, exchange_id,
    created_at``; ``stamped`` keeps the exchange id and time (history) or drops them."""
    role, content, tool_calls, tool_call_id, name, exchange_id, created_at = row
    return Message(
        role=role,
        content=content,
        tool_calls=_tool_calls(tool_calls),
        tool_call_id=tool_call_id,
        name=name,
        exchange_id=exchange_id if stamped else None,
        created_at=utc(created_at) if stamped else None,
    )


def exchange(row: Sequence[Any], messages: Sequence[Message]) -> Exchange:
    """An exchange from the columns of :data:`EXCHANGE_SELECT` and its messages."""
    (id_, entity_id, session_id, process_id, provider, operation, request_model, response_model,
     system, stream, status, error, finish_reasons, input_tokens, output_tokens, cached,
     input_count, started_at, ended_at, metadata) = row  # fmt: skip
    return Exchange(
        attribution=Attribution(entity_id=entity_id, session_id=session_id, process_id=process_id),
        provider=provider,
        operation=operation,
        input=messages[:input_count],
        output=messages[input_count:],
        system=system,
        request_model=request_model,
        response_model=response_model,
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens, cached_input_tokens=cached),
        finish_reasons=finish_reasons,
        stream=stream,
        status=status,
        error=error,
        started_at=utc(started_at),
        ended_at=utc(ended_at),
        metadata=_metadata(metadata),
        id=id_,
    )


def fact(row: Sequence[Any]) -> Fact:
    """A fact from the columns of :data:`FACT_SELECT`."""
    (id_, entity_id, process_id, text, kind, source_exchange_id, supersedes, superseded_by,
     created_at, metadata) = row  # fmt: skip
    return Fact(
        entity_id=entity_id,
        text=text,
        process_id=process_id,
        kind=kind,
        source_exchange_id=source_exchange_id,
        supersedes=supersedes,
        superseded_by=superseded_by,
        created_at=utc(created_at),
        metadata=_metadata(metadata),
        id=id_,
    )


EXCHANGE_SELECT = """e.id, e.entity_id, e.session_id, e.process_id, e.provider, e.operation,
    e.request_model, e.response_model, e.system, e.stream, e.status, e.error, e.finish_reasons,
    e.input_tokens, e.output_tokens, e.cached_input_tokens, e.input_count, e.started_at,
    e.ended_at, e.metadata"""
MESSAGE_SELECT = "m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.exchange_id, m.created_at"
FACT_SELECT = """id, entity_id, process_id, text, kind, source_exchange_id, supersedes,
    superseded_by, created_at, metadata"""
