"""Turning model objects into PostgreSQL rows for bulk inserts (reading rows back, and what
else SQL backends share, is :mod:`memtap.storage.sqlrows`, re-exported here)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from memtap.sdk import Exchange, Fact
from memtap.sdk.storage import (
    EXCHANGE_SELECT,
    FACT_SELECT,
    MESSAGE_SELECT,
    exchange_messages,
    injected_to_json,
)
from memtap.sdk.storage import sql_columns as columns
from memtap.sdk.storage import sql_exchange as exchange
from memtap.sdk.storage import sql_fact as fact
from memtap.sdk.storage import sql_message as message
from memtap.sdk.storage import sql_session_rows as session_rows
from memtap.sdk.storage import sql_unique as unique
from memtap.sdk.storage import sql_utc as utc

__all__ = [
    "EXCHANGE_SELECT",
    "FACT_SELECT",
    "MESSAGE_SELECT",
    "clean",
    "columns",
    "dump",
    "exchange",
    "exchange_rows",
    "fact",
    "fact_rows",
    "message",
    "message_rows",
    "session_rows",
    "unique",
    "utc",
]


def clean(text: str | None) -> str | None:
    """``text`` without NUL characters, which PostgreSQL text cannot hold (each becomes
    U+FFFD: one character changed instead of a batch refused forever)."""
    if text is None or "\x00" not in text:
        return text
    return text.replace("\x00", "\ufffd")


def dump(value: Any) -> str | None:
    """JSON text of a non-empty value (``None`` for empty), NUL-free."""
    return clean(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) if value else None


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
            dump(ex.metadata), _injected(ex),
        ))  # fmt: skip
    return rows


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {k: _cleaned(v) for k, v in value.items()}
    return value


def _injected(ex: Exchange) -> str | None:
    """The ``injected`` column: JSON of what memtap injected (``None``: nothing), without
    NUL characters (JSONB refuses ``\\u0000``)."""
    if not ex.injected:
        return None
    return json.dumps(_cleaned(injected_to_json(ex.injected)), ensure_ascii=False, separators=(",", ":"))


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


def fact_rows(facts: Sequence[Fact]) -> list[tuple[Any, ...]]:
    """One row per fact (``seq`` is assigned by the database)."""
    return [
        (f.id, f.entity_id, f.process_id, clean(f.text), f.kind, f.source_exchange_id,
         f.supersedes, f.superseded_by, utc(f.created_at), dump(f.metadata))
        for f in facts
    ]  # fmt: skip
