"""What each page shows, read from a :class:`memtap.Memory` (no HTML here: see the templates)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable

import attrs

from memtap import Exchange, Fact, Memory, Message, SessionInfo
from memtap.sdk.server import redact_id, term_counts

#: Fact kinds that record a retraction, not something known (memorize's DELETE).
TOMBSTONE = "tombstone"
#: A fact repeats a forgotten one when it holds this share of its words (stemmed).
REPEAT_SHARE = 0.6
#: Repeats offered at most after one forget.
MAX_REPEATS = 20


@attrs.frozen
class EntityRow:
    """One entity on the home page."""

    entity_id: str
    facts: int
    sessions: int
    last_active: _dt.datetime | None


@attrs.frozen
class FactRow:
    """A current fact, the facts it replaced, newest first (its superseded history), and
    who said it (:func:`said_by`)."""

    fact: Fact
    history: tuple[Fact, ...]
    said_by: str = ""


def said_by(fact: Fact) -> str:
    """Who a fact comes from: ``"user"`` or ``"assistant"`` (a turn kept verbatim: an
    episode), ``"learned"`` (memorize drew it from a conversation), ``"remembered"`` (the
    app's ``remember()`` or the agent's memory tool, or an import of those)."""
    if fact.kind == "episode":
        return fact.metadata.get("role", "user")
    if fact.source_exchange_id and fact.metadata.get("source") != "memory_tool":
        return "learned"
    return "remembered"


@attrs.frozen
class EntityPage:
    """An entity's current facts (with history), its retracted facts and its sessions."""

    entity_id: str
    facts: tuple[FactRow, ...]
    retracted: tuple[Fact, ...]
    sessions: tuple[SessionInfo, ...]

    @property
    def exists(self) -> bool:
        """Whether the store has anything of the entity."""
        return bool(self.facts or self.retracted or self.sessions)


@attrs.frozen
class Call:
    """One captured call of a session: its exchange and the session's messages it added."""

    exchange_id: str | None
    exchange: Exchange | None
    messages: tuple[Message, ...]


def entities(memory: Memory) -> list[EntityRow]:
    """Every entity with its current fact count, its session count and its last activity
    (its latest session's last exchange, or its newest fact), most recently active first."""
    memory.flush()
    rows = []
    for entity_id in memory.store.entities():
        facts = [f for f in memory.facts(entity_id=entity_id) if f.kind != TOMBSTONE]
        sessions = memory.sessions(entity_id=entity_id, limit=1_000_000)
        times = [s.updated_at for s in sessions[:1]] + [f.created_at for f in facts[:1]]
        rows.append(EntityRow(entity_id, len(facts), len(sessions), max(times) if times else None))
    epoch = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    return sorted(rows, key=lambda r: (r.last_active or epoch, r.entity_id), reverse=True)


def entity(memory: Memory, entity_id: str) -> EntityPage:
    """What the entity page shows."""
    memory.flush()
    every = memory.store.facts(entity_id=entity_id, include_superseded=True)
    by_id = {f.id: f for f in every}
    rows: list[FactRow] = []
    retracted: list[Fact] = []
    for f in every:  # newest first
        if f.kind == TOMBSTONE:
            continue
        if f.superseded_by is None:
            rows.append(FactRow(f, tuple(_replaced(f, by_id)), said_by(f)))
        elif by_id.get(f.superseded_by, f).kind == TOMBSTONE:
            retracted.append(f)
    sessions = memory.sessions(entity_id=entity_id, limit=1_000_000)
    return EntityPage(entity_id, tuple(rows), tuple(retracted), tuple(sessions))


@attrs.frozen
class SearchResults:
    """What the search page shows: facts holding every word of the query, and sessions
    whose id or entity holds it; ``truncated`` when there were more than the page lists."""

    facts: tuple[Fact, ...]
    sessions: tuple[SessionInfo, ...]
    truncated: bool


def search(memory: Memory, query: str, limit: int) -> SearchResults:
    """Every entity's current facts that hold all the words of ``query`` (stemmed, as
    recall reads them), and the sessions whose id or entity holds ``query``
    (case-insensitive), :data:`limit` of each at most, newest first."""
    memory.flush()
    wanted = set(term_counts(query))
    needle = query.strip().lower()
    facts: list[Fact] = []
    sessions: list[SessionInfo] = []
    truncated = False
    for entity_id in memory.store.entities():
        if wanted:
            for fact in memory.facts(entity_id=entity_id):
                if wanted <= set(term_counts(fact.text)):
                    facts.append(fact)
        if needle:
            for info in memory.sessions(entity_id=entity_id, limit=1_000_000):
                if needle in info.session_id.lower() or needle in info.entity_id.lower():
                    sessions.append(info)
        if len(facts) > limit or len(sessions) > limit:
            truncated = True
            break
    facts.sort(key=lambda f: f.created_at, reverse=True)
    sessions.sort(key=lambda s: s.updated_at, reverse=True)
    truncated = truncated or len(facts) > limit or len(sessions) > limit
    return SearchResults(tuple(facts[:limit]), tuple(sessions[:limit]), truncated)


def forget_fact(memory: Memory, entity_id: str, fact_id: str) -> tuple[int, list[Fact]]:
    """Forget one fact; how many facts were deleted, and the entity's facts and episodes
    that repeat it (:func:`repeats_of`): the model's echo of it, the turn that said it."""
    every = memory.store.facts(entity_id=redact_id(entity_id), include_superseded=True)
    text = next((f.text for f in every if f.id == fact_id), None)
    count = memory.forget(entity_id=entity_id, fact_id=fact_id)
    return count, repeats_of(memory, entity_id, text) if count and text else []


def repeats_of(memory: Memory, entity_id: str, text: str) -> list[Fact]:
    """The entity's current facts and episodes that hold most (:data:`REPEAT_SHARE`) of
    the words of ``text``, newest first, :data:`MAX_REPEATS` at most."""
    wanted = set(term_counts(text))
    if not wanted:
        return []
    found = []
    for fact in memory.facts(entity_id=entity_id):
        if len(wanted & set(term_counts(fact.text))) >= REPEAT_SHARE * len(wanted):
            found.append(fact)
            if len(found) >= MAX_REPEATS:
                break
    return found


def _replaced(fact: Fact, by_id: dict[str, Fact]) -> Iterable[Fact]:
    """The facts ``fact`` replaced, newest first (a cycle, never written, ends the walk)."""
    seen = {fact.id}
    while fact.supersedes is not None and fact.supersedes not in seen:
        older = by_id.get(fact.supersedes)
        if older is None:
            return
        seen.add(older.id)
        yield older
        fact = older


def session_calls(memory: Memory, session_id: str, entity_id: str | None) -> list[Call]:
    """A session's messages, oldest first, grouped by the captured call that added them;
    each call with its exchange (what memtap injected into it: ``Exchange.injected``)."""
    messages = memory.history(session_id, entity_id=entity_id)
    exchanges = {x.id: x for x in memory.exchanges(entity_id=entity_id, session_id=session_id)}
    calls: list[Call] = []
    for m in messages:
        if calls and calls[-1].exchange_id == m.exchange_id:
            last = calls[-1]
            calls[-1] = attrs.evolve(last, messages=(*last.messages, m))
        else:
            calls.append(Call(m.exchange_id, exchanges.get(m.exchange_id or ""), (m,)))
    return calls
