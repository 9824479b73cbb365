"""How ``memtap quarantine list`` shows the calls a store refused (rich)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from memtap.capture.quarantine import QuarantinedRecord
from memtap.protocol.model import Fact
from memtap.storage.storable import storable

#: Characters of a record's first text and of its reason shown in the table.
PREVIEW_CHARS = 60


def _short(text: str, width: int = PREVIEW_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def quarantine_table(records: Sequence[QuarantinedRecord], title: str) -> Table:
    """One row per quarantined call: its id, who it belongs to, when it was refused, the
    start of what was said (redacted, as kept), and why the store refused it."""
    table = Table(title=title)
    for column in ("id", "entity", "session", "quarantined (UTC)", "said", "reason"):
        table.add_column(column, overflow="fold")
    for record in records:
        ex = storable(record.exchange)  # what a terminal can print (a lone surrogate as U+FFFD)
        said = next((m.content for m in ex.messages if m.content.strip()), "")
        table.add_row(
            ex.id,
            ex.attribution.entity_id,
            ex.attribution.session_id,
            record.at.strftime("%Y-%m-%d %H:%M:%S"),
            _short(said),
            _short(record.reason, 2 * PREVIEW_CHARS),
        )
    return table


def quarantine_facts_table(facts: Sequence[tuple[Fact, str]], title: str) -> Table:
    """One row per quarantined fact: its id, entity, the start of its text (redacted, as
    kept) and why the store refused it."""
    table = Table(title=title)
    for column in ("id", "entity", "kind", "text", "reason"):
        table.add_column(column, overflow="fold")
    for fact, reason in facts:
        table.add_row(
            fact.id,
            fact.entity_id,
            fact.kind,
            _short(storable(fact.text)),
            _short(reason, 2 * PREVIEW_CHARS),
        )
    return table
