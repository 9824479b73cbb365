"""Built-in injector of recalled facts: the entity's facts relevant to the latest user turn,
as one ``memory`` system block, within a token budget and a deadline.

Fail open: a cold index (loaded in the background meanwhile), a slow or failing embedder
(lexical recall instead), or any error (nothing injected) never holds up or fails the
call. Facts the injected history already carries are not repeated.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Awaitable
from typing import Any

import attrs

from memtap.capture.explanation import Considered, RecallNote
from memtap.history.conversation import CHARS_PER_TOKEN, HistoryBudget, cached_plan
from memtap.history.injector import SessionHistories, request_budget
from memtap.hookspecs import hookimpl
from memtap.longterm.answerable import can_answer
from memtap.longterm.index import ScoreParts
from memtap.longterm.recall import RecallEngine
from memtap.longterm.temporal import resolved_note
from memtap.longterm.text import normalise
from memtap.memo import IdentityMemo
from memtap.protocol.model import Fact, Message, ScoredFact
from memtap.protocol.wire import InjectionRequest, SystemBlock

log = logging.getLogger("memtap.longterm.recall")

#: First line of the injected block (inside memtap's labelled, escaped memory element).
HEADER = "Facts remembered from earlier conversations with this user (most relevant first):"
_SPACES = re.compile(r"\s+")


@attrs.frozen
class RecallBudget:
    """How recalled facts are injected: at most ``k`` facts and about ``max_tokens`` tokens
    (characters / 4), only facts scoring at least ``min_score`` (0..1) that can answer the
    kind of question asked (a name, a number, an age, an amount, someone else's work:
    :func:`memtap.longterm.answerable.can_answer`),
    found within ``deadline`` seconds or not at all. ``k=0`` turns injection off.

    ``min_score`` 0.05 was kept after calibrating it on the tuning halves (docs/benchmarks.md,
    issue 34): higher thresholds cost answerable questions their evidence about as often as
    they spared never-answered ones an injection."""

    k: int = 6
    max_tokens: int = 300
    min_score: float = 0.05
    deadline: float = 0.05
    #: The longest a call waits for the full model's vector of its question (seconds,
    #: within ``deadline``) when its words and the quick vector do not settle it; past it
    #: the quick vector answers, and the full one, made meanwhile, serves the same
    #: question's next request (an agent's tool loop asks it on every request of a turn).
    #: The full model costs 4-10 ms a query on an idle 2-core machine, several times that
    #: under load: 0.02 waits for it when the machine can give it, not when it cannot.
    #: 0 never waits (a constant +1 ms or so), at a cost in first-ask recall: on the tuning
    #: half of the LongMemEval-shaped set, evidence injected 0.72 instead of 0.87
    #: (docs/benchmarks.md, "Recall under sustained load").
    model_wait: float = 0.02
    #: Whether a call waits for the full model (up to ``model_wait``) even while calls ask
    #: it for their questions' vectors faster than it makes them (more than a quarter of
    #: a core's worth over the last second: sustained load, where the wait becomes the
    #: model's time under contention on every call and the added latency grows with the
    #: load). By default it does not: then the words and the quick vector answer, and a
    #: question asked again (a tool loop's next request) gets the full model's vector in
    #: the background (``RecallStats.model_shed``; issue 37, docs/benchmarks.md).
    wait_under_load: bool = False

    def __attrs_post_init__(self) -> None:
        if self.k < 0 or self.max_tokens < 0 or self.deadline < 0 or self.model_wait < 0:
            raise ValueError("RecallBudget limits must be zero or positive")


def latest_user_text(messages: tuple[Message, ...]) -> str:
    """The content of the last user message (the query recall answers)."""
    for m in reversed(messages):
        if m.role == "user" and m.content.strip():
            return m.content
    return ""


def fact_line(fact: Fact) -> str:
    """One fact as a single line of the block (line breaks flattened; ``render_blocks``
    escapes the rest): its date, who said it, its text, and what a relative time in it
    meant ("yesterday" in a fact of 8 May 2023 is 7 May: :func:`resolved_note`)."""
    date = fact.created_at.date().isoformat()
    said = ""
    if fact.kind == "episode":
        said = "you (the assistant) said: " if fact.metadata.get("role") == "assistant" else "the user said: "
    note = resolved_note(fact.text, fact.created_at)
    return f"- [{date}] {said}{_SPACES.sub(' ', fact.text).strip()}" + (f" ({note})" if note else "")


#: Each injected fact's line, made once per fact object: an entity's facts are the index's
#: objects, recalled call after call, and a line's time note costs a parse of its text
#: (~20 µs, five lines a call).
_LINES: IdentityMemo[Fact, str] = IdentityMemo(4096)


def _why_none(hits: list[ScoredFact] | None, below: list[ScoredFact]) -> str:
    """Why a search gave nothing to inject (for the debug log)."""
    if hits is None:
        return (
            "its fact index was not ready within the recall deadline: still loading from the "
            "store (the next call has it; `Memory.scope` or `register` start the load early), "
            "or held by a background change (RecallStats.busy_skips)"
        )
    if below:
        return f"{len(below)} fact(s) scored under min_score"
    return "no stored fact matched the question"


@attrs.frozen
class _Handed:
    """A prefetched search's answer, for the same call's injections."""

    request: InjectionRequest
    hits: list[ScoredFact] | None
    parts: dict[str, ScoreParts]
    below: list[ScoredFact]


#: Set by the prefetch in the call's task, read by its injections (the same task).
_HANDED: contextvars.ContextVar[_Handed | None] = contextvars.ContextVar("memtap_recall_handed", default=None)


class RecallPlugin:
    """Injects the call's entity's recalled facts as a ``memory`` block."""

    def __init__(
        self,
        engine: RecallEngine,
        histories: SessionHistories,
        history_budget: HistoryBudget,
        budget: RecallBudget,
    ) -> None:
        self.engine = engine
        self.histories = histories
        self.history_budget = history_budget
        self.budget = budget

    def _carried(self, request: InjectionRequest) -> tuple[set[str], set[str]]:
        """Exchange ids and texts the history injected for the request carries."""
        history = self.histories.get(request.attribution)
        plan = cached_plan(history, request.request.messages, request_budget(request, self.history_budget))
        ids = {m.exchange_id for m in plan.messages if m.exchange_id} | plan.resent_exchange_ids
        texts = {normalise(m.content) for m in plan.messages if m.content}
        return ids, texts

    def _search_options(
        self, request: InjectionRequest, parts: dict[str, ScoreParts], below: list[ScoredFact]
    ) -> dict[str, Any]:
        """The engine's search arguments for ``request`` (``parts`` and ``below`` are
        filled for explain: the parts of each score, the facts under the threshold)."""
        budget = self.budget
        return {
            "entity_id": request.attribution.entity_id,
            "process_id": request.attribution.process_id,
            "k": budget.k * 2,
            "min_score": budget.min_score,
            "deadline": budget.deadline,
            "model_wait": budget.model_wait,
            "shed": not budget.wait_under_load,
            "parts": parts,
            "below": below,
        }

    @hookimpl
    def memtap_request_prefetch(self, request: InjectionRequest) -> Awaitable[None] | None:
        """On an event loop: the search, its wait for the full model awaited (the loop goes
        on meanwhile); its result is handed to :meth:`memtap_request_injections`."""
        budget = self.budget
        if budget.k == 0 or budget.max_tokens == 0:
            return None
        query = latest_user_text(request.request.messages)
        return self._prefetch(request, query) if query else None

    async def _prefetch(self, request: InjectionRequest, query: str) -> None:
        parts: dict[str, ScoreParts] = {}
        below: list[ScoredFact] = []
        hits = await self.engine.search_async(query, **self._search_options(request, parts, below))
        _HANDED.set(_Handed(request, hits, parts, below))

    @hookimpl
    def memtap_request_injections(self, request: InjectionRequest) -> list[SystemBlock]:
        """Recall for the latest user turn and inject what fits the budget."""
        budget = self.budget
        if budget.k == 0 or budget.max_tokens == 0:
            return []
        query = latest_user_text(request.request.messages)
        if not query:
            return []
        attribution = request.attribution
        handed = _HANDED.get()
        try:
            if handed is not None and handed.request is request:
                _HANDED.set(None)
                hits, parts, below = handed.hits, handed.parts, handed.below
            else:
                parts = {}
                below = []
                hits = self.engine.search(query, **self._search_options(request, parts, below))
            if not hits:
                log.debug(
                    "memtap: no recalled facts for entity %r in this call: %s",
                    attribution.entity_id,
                    _why_none(hits, below),
                )
                return []
            # What the request itself says first: the history's plan only when a hit
            # is not that (a tool loop's recall finds the question it repeats).
            own = {normalise(m.content) for m in request.request.messages if m.content}
            ids: set[str] = set()
            texts: set[str] = set()
            if any(normalise(hit.fact.text) not in own for hit in hits):
                ids, texts = self._carried(request)
        except Exception:
            log.warning("memtap recall failed; the call goes on without recalled facts", exc_info=True)
            return []
        lines: list[str] = []
        line_ids: list[str] = []
        considered: list[Considered] = []
        used = len(HEADER) // CHARS_PER_TOKEN
        for hit in hits:
            fact = hit.fact
            # A question asking for a name (a number) is not answered by a fact that gives
            # none (memtap.longterm.answerable): better nothing than an invitation to make
            # one up.
            if not can_answer(query, fact.text):
                considered.append(Considered(fact, hit.score, parts.get(fact.id), "not an answer"))
                continue
            if len(lines) >= budget.k:
                considered.append(Considered(fact, hit.score, parts.get(fact.id), "limit"))
                continue
            norm = normalise(fact.text)
            if norm in own or norm in texts or (fact.source_exchange_id and fact.source_exchange_id in ids):
                considered.append(Considered(fact, hit.score, parts.get(fact.id), "duplicate"))
                continue
            line = _LINES.get(fact, fact_line)
            cost = 1 + len(line) // CHARS_PER_TOKEN
            if used + cost > budget.max_tokens:
                considered.append(Considered(fact, hit.score, parts.get(fact.id), "budget"))
                continue
            lines.append(line)
            line_ids.append(fact.id)
            considered.append(Considered(fact, hit.score, parts.get(fact.id)))
            used += cost
        if not lines:
            return []
        considered.extend(Considered(h.fact, h.score, parts.get(h.fact.id), "threshold") for h in below)
        text = HEADER + "\n" + "\n".join(lines)
        # Fact ids per line let a session's kept block leave out what it already holds.
        ids_per_line = ("",) * len(HEADER.splitlines()) + tuple(line_ids)
        block = SystemBlock(text=text, slot="memory", priority=50, cache="per_turn", source="recall")
        return [attrs.evolve(block, fact_ids=ids_per_line, note=RecallNote(tuple(considered)))]
