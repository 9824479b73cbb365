"""What the SQL storage backends share: the column lists they select, and the conversion of
rows back into model objects (and of exchanges into session rows).

The DuckDB and PostgreSQL plugins use one schema; only their SQL dialects and insert
strategies differ, so reading rows is written once here. JSON columns may arrive as text
(DuckDB) or already decoded (psycopg): both are accepted.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from memtap.memo import IdentityMemo
from memtap.protocol.json_encoder import compact_encoder
from memtap.protocol.model import (
    Attribution,
    Exchange,
    Fact,
    InjectedBlock,
    Message,
    ToolCall,
    Usage,
    injected_converter,
    injected_from_json,
    injected_to_json,
)

log = logging.getLogger("memtap.storage.store")

_UTC = _dt.timezone.utc

#: Columns of ``exchanges`` (aliased ``e``) that :func:`exchange` reads, in order.
EXCHANGE_SELECT = """e.id, e.entity_id, e.session_id, e.process_id, e.provider, e.operation,
    e.request_model, e.response_model, e.system, e.stream, e.status, e.error, e.finish_reasons,
    e.input_tokens, e.output_tokens, e.cached_input_tokens, e.input_count, e.started_at,
    e.ended_at, e.metadata, e.injected"""
#: Columns of ``messages`` (aliased ``m``) that :func:`message` reads, in order.
MESSAGE_SELECT = "m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.exchange_id, m.created_at"
#: Columns of ``facts`` that :func:`fact` reads, in order.
FACT_SELECT = """id, entity_id, process_id, text, kind, source_exchange_id, supersedes,
    superseded_by, created_at, metadata"""


def utc(value: _dt.datetime) -> _dt.datetime:
    """``value`` as an aware UTC datetime (naive values are taken to be UTC already)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=_UTC)
    return value.astimezone(_UTC)


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


def _json(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str) else raw


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(**call) for call in _json(raw)) if raw else ()


def _metadata(raw: Any) -> dict[str, str]:
    data: dict[str, str] = _json(raw) if raw else {}
    return data


def message(row: Sequence[Any], *, stamped: bool) -> Message:
    """A message from the columns of :data:`MESSAGE_SELECT`; ``stamped`` keeps the exchange
    id and time (history) or drops them (an exchange's own messages)."""
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


def _injected(raw: Any) -> tuple[InjectedBlock, ...]:
    """The ``injected`` column (JSON of :func:`memtap.protocol.model.injected_to_json`), or nothing
    when it is empty or unreadable (a diagnostic record never makes an exchange unreadable)."""
    if not raw:
        return ()
    try:
        return injected_from_json(_json(raw))
    except Exception:
        log.warning("memtap could not read a stored record of what was injected; ignoring it", exc_info=True)
        return ()


def injected_json(exchange: Exchange) -> str | None:
    """The ``injected`` column of an exchange: JSON text, ``None`` when nothing was injected.

    The JSON of :func:`memtap.protocol.model.injected_to_json`, written block by block: a
    session's history is injected call after call, its turns the same objects each time
    (:mod:`memtap.capture.explanation` keeps them), so each turn is encoded once
    (:data:`_TURNS`) and each block around its turns."""
    if not exchange.injected:
        return None
    return "[" + ",".join(map(_block_json, exchange.injected)) + "]"


def _block_json(block: InjectedBlock) -> str:
    plain = injected_to_json((attrs.evolve(block, turns=()) if block.turns else block,))[0]
    text = _ENCODER.encode(plain)
    if not block.turns:
        return text
    # Every field is written, in order, turns last: the block ends with ``"turns":[]}``,
    # and its turns go in between (another layout is encoded whole).
    if not text.endswith('"turns":[]}'):
        return _ENCODER.encode(injected_to_json((block,))[0])
    return text[:-3] + "[" + ",".join(_TURNS.get(turn, _turn_json) for turn in block.turns) + "]}"


def _turn_json(turn: Message) -> str:
    return _ENCODER.encode(injected_converter.unstructure(turn, Message))


#: Each injected turn's JSON, encoded once while its message comes back.
_TURNS: IdentityMemo[Message, str] = IdentityMemo(4096)
_ENCODER = compact_encoder()


def exchange(row: Sequence[Any], messages: Sequence[Message]) -> Exchange:
    """An exchange from the columns of :data:`EXCHANGE_SELECT` and its messages."""
    (id_, entity_id, session_id, process_id, provider, operation, request_model, response_model,
     system, stream, status, error, finish_reasons, input_tokens, output_tokens, cached,
     input_count, started_at, ended_at, metadata, injected) = row  # fmt: skip
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
        finish_reasons=_json(finish_reasons) or (),
        stream=stream,
        status=status,
        error=error,
        started_at=utc(started_at),
        ended_at=utc(ended_at),
        metadata=_metadata(metadata),
        id=id_,
        injected=_injected(injected),
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


def session_rows(fresh: Sequence[Exchange]) -> list[tuple[Any, ...]]:
    """One row per (entity, session) of ``fresh``: the earliest exchange's process id, the
    first and last start times. One row per key (DuckDB can't update a row twice in one
    statement), sorted by key (concurrent PostgreSQL upserts then lock rows in one order)."""
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
