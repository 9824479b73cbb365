"""Why the model saw what it saw: the record of what memtap injected into each captured call.

While a call is prepared, the injectors say what they injected: the history injector its
turns, the recall injector its facts with their scores and score parts, and what it
considered but left out (:class:`RecallNote`, kept on the :class:`~memtap.protocol.wire.SystemBlock`
it returns). The request path only keeps references to those; the capture writer turns
them into :class:`~memtap.protocol.model.InjectedBlock` records (redacted like the messages), which
are stored with the exchange (``Exchange.injected``) and read back by
:meth:`memtap.Memory.explain`. Recording fails open: a problem leaves the exchange without
its record, never the call without its answer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from memtap.memo import IdentityMemo
from memtap.protocol.model import Exchange, ExplainedFact, Explanation, Fact, InjectedBlock, Message
from memtap.redact import redact_text

if TYPE_CHECKING:
    from memtap.protocol.wire import InjectionPlan
    from memtap.storage.store import Store

log = logging.getLogger("memtap.capture.explanation")

#: ``InjectedBlock.kind`` of the session's earlier turns.
HISTORY = "history"
#: ``InjectedBlock.kind`` of recalled facts (the recall injector's ``source``).
RECALL = "recall"


@attrs.frozen
class Considered:
    """One fact recall considered for a call, as the request path keeps it (turned into
    an :class:`~memtap.protocol.model.ExplainedFact` in the background)."""

    fact: Fact
    score: float
    #: The score's parts: a mapping of names to values, or raw ones with an ``as_dict()``
    #: method (:class:`memtap.longterm.index.ScoreParts`, named in the background).
    parts: Any = None
    reason: str | None = None


@attrs.frozen
class RecallNote:
    """What the recall injector did for one call: the facts it injected and those it left
    out, in the order it considered them (best first)."""

    considered: tuple[Considered, ...] = ()


def _parts(raw: Any) -> dict[str, float]:
    named: Mapping[str, float] = raw.as_dict() if hasattr(raw, "as_dict") else (raw or {})
    return {k: round(float(v), 6) for k, v in named.items()}


def _fact(c: Considered) -> ExplainedFact:
    return ExplainedFact(
        fact_id=c.fact.id,
        text=redact_text(c.fact.text),
        score=round(float(c.score), 6),
        parts=_parts(c.parts),
        reason=c.reason,
    )


def _make_turn(m: Message) -> tuple[Message, str]:
    content = redact_text(m.content)
    calls = tuple(attrs.evolve(c, arguments=redact_text(c.arguments)) for c in m.tool_calls)
    turn = attrs.evolve(m, content=content, tool_calls=calls, created_at=None)
    return turn, str(turn)


#: Injected turns as the record holds them (redacted, without their time) and their text,
#: made once per message object: a session's history is injected call after call, and its
#: latest turns are the same objects each time.
_TURNS: IdentityMemo[Message, tuple[Message, str]] = IdentityMemo(4096)


def injected_blocks(plan: InjectionPlan) -> tuple[InjectedBlock, ...]:
    """The record of what ``plan`` injected (redacted): its history, then its system
    blocks in the order they were placed. Called by the capture writer, off the request
    path."""
    out: list[InjectedBlock] = []
    if plan.history:
        made = [_TURNS.get(m, _make_turn) for m in plan.history]
        out.append(
            InjectedBlock(kind=HISTORY, text="\n".join(t for _, t in made), turns=tuple(m for m, _ in made))
        )
    for block in plan.system_blocks:
        note = block.note if isinstance(block.note, RecallNote) else None
        considered = note.considered if note is not None else ()
        if block.fact_ids and considered:
            # A session's kept block already held some facts: this turn's block left them out.
            kept = set(block.fact_ids)
            considered = tuple(
                attrs.evolve(c, reason="duplicate") if c.reason is None and c.fact.id not in kept else c
                for c in considered
            )
        out.append(
            InjectedBlock(
                kind=block.source or "other",
                text=redact_text(block.text),
                facts=tuple(_fact(c) for c in considered if c.reason is None),
                left_out=tuple(_fact(c) for c in considered if c.reason is not None),
            )
        )
    return tuple(out)


def find_exchange(store: Store, exchange_id: str) -> Exchange | None:
    """The stored exchange with this id: the store's ``exchange`` method when it has one,
    else a pass over :meth:`~memtap.storage.store.Store.exchanges`."""
    reader = getattr(store, "exchange", None)
    if callable(reader):
        found: Exchange | None = reader(exchange_id)
        return found
    every: Iterator[Exchange] = store.exchanges()
    for exchange in every:
        if exchange.id == exchange_id:
            return exchange
    return None


def explain(store: Store, exchange_id: str) -> Explanation | None:
    """The :class:`~memtap.protocol.model.Explanation` of a stored exchange, or ``None`` when no
    exchange has that id."""
    exchange = find_exchange(store, exchange_id)
    if exchange is None:
        return None
    return Explanation(exchange=exchange, blocks=exchange.injected)


def with_injected(exchange: Exchange, plan: InjectionPlan | None) -> Exchange:
    """``exchange`` with the record of ``plan`` (fail open: unchanged on any error)."""
    if plan is None or plan.empty:
        return exchange
    try:
        return attrs.evolve(exchange, injected=injected_blocks(plan))
    except Exception:
        log.warning("memtap could not record what it injected into a call", exc_info=True)
        return exchange
