"""The JSONL export format: moving a store between backends (``memtap export`` /
``memtap import``).

One JSON object per line. The first is a header, ``{"type": "memtap-export", "version":
1}``; then one record per exchange (``{"type": "exchange", "data": {...}}``) and per fact
(``{"type": "fact", "data": {...}}``, superseded facts included), each serialised by the
model's cattrs converter, so a round trip through any backend loses nothing. Import is
idempotent: records whose ids the store has are skipped. Both directions redact secrets
(:mod:`memtap.redact`): an export never carries one, even from a store written by an older
memtap, and an import never writes one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from memtap.errors import MemtapError
from memtap.protocol.model import Exchange, Fact, from_dict, to_dict
from memtap.redact import redact_exchange, redact_fact
from memtap.storage.store import Store

FORMAT = "memtap-export"
VERSION = 1
_BATCH = 500


class ExportFormatError(MemtapError, ValueError):
    """A file is not a memtap export (or a line of it is damaged)."""


def export_records(store: Store) -> Iterator[dict[str, Any]]:
    """The header, every exchange (oldest first), then every fact of every entity
    (:meth:`~memtap.storage.store.Store.entities`, sessions or not; per entity, oldest first)."""
    yield {"type": FORMAT, "version": VERSION}
    for exchange in store.exchanges():
        yield {"type": "exchange", "data": to_dict(redact_exchange(exchange))}
    for entity in store.entities():
        for fact in reversed(store.facts(entity_id=entity, include_superseded=True)):
            yield {"type": "fact", "data": to_dict(redact_fact(fact))}


def write_export(store: Store, out: IO[str], progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Write ``store`` to ``out`` as JSONL; ``progress(n)`` is told of every record."""
    counts = {"exchange": 0, "fact": 0}
    for record in export_records(store):
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        kind = record["type"]
        if kind in counts:
            counts[kind] += 1
            if progress is not None:
                progress(1)
    return counts


def read_records(lines: Iterable[str]) -> Iterator[tuple[str, Exchange | Fact]]:
    """Parse an export (checking its header) into ``("exchange", Exchange)`` and
    ``("fact", Fact)`` pairs. Raises :class:`ExportFormatError` naming a bad line."""
    header_seen = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        transcript = False
        try:
            record = json.loads(line)
            transcript = not header_seen and isinstance(record, dict) and "role" in record
            kind = record["type"]
        except (ValueError, KeyError, TypeError) as exc:
            if transcript:
                raise ExportFormatError(
                    "this looks like a conversation transcript (a message per line), not a memtap "
                    "export: import it with `memtap import-transcript FILE --entity ENTITY`"
                ) from exc
            raise ExportFormatError(f"line {number} is not a memtap export record: {exc}") from exc
        if not header_seen:
            if kind != FORMAT or record.get("version") != VERSION:
                raise ExportFormatError(
                    f"not a memtap export (version {VERSION}): the first line must be its header"
                )
            header_seen = True
            continue
        try:
            if kind == "exchange":
                yield kind, from_dict(record["data"], Exchange)
            elif kind == "fact":
                yield kind, from_dict(record["data"], Fact)
            else:
                raise ExportFormatError(f"line {number}: unknown record type {kind!r}")
        except ExportFormatError:
            raise
        except Exception as exc:
            raise ExportFormatError(f"line {number}: damaged {kind} record: {exc}") from exc


def import_records(
    store: Store,
    records: Iterable[tuple[str, Exchange | Fact]],
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Write records to ``store`` in batches (idempotently); return how many were read."""
    counts = {"exchange": 0, "fact": 0}
    exchanges: list[Exchange] = []
    facts: list[Fact] = []

    def flush() -> None:
        if exchanges:
            store.write_exchanges(exchanges)
        if facts:
            store.add_facts(facts)
        if progress is not None and (exchanges or facts):
            progress(len(exchanges) + len(facts))
        exchanges.clear()
        facts.clear()

    for kind, item in records:
        counts[kind] += 1
        if isinstance(item, Exchange):
            exchanges.append(redact_exchange(item))
        else:
            facts.append(redact_fact(item))
        if len(exchanges) + len(facts) >= _BATCH:
            flush()
    flush()
    return counts
