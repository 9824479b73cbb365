"""``MemoryMiddleware``: memtap for ``langchain.agents.create_agent``.

Before each model call the entity's facts relevant to the latest user message are added, for
that call only, as a labelled read-only block at the end of the system message: the agent
state (and so its checkpoints and summaries) never contains them. After the agent ends, its
final turn is handed to memtap's capture path, which stores it in the background (and
learns from it when memorize is on). Nothing here ever raises into the agent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langchain_core.messages import SystemMessage

from memtap import Memory
from memtap.sdk import ScoredFact, SystemBlock, render_blocks

from .convert import final_turn, latest_user_text

log = logging.getLogger("memtap.langchain")

#: Key (or attribute) of the runtime context that turns memory off for one run when false.
SWITCH_KEY = "memtap"


@attrs.frozen
class Who:
    """Attribution of one agent run."""

    entity_id: str | None
    session_id: str | None
    enabled: bool = True


def _field(context: Any, name: str) -> Any:
    if context is None:
        return None
    if isinstance(context, Mapping):
        return context.get(name)
    return getattr(context, name, None)


def _thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except Exception:  # outside a graph run there is no config
        return None
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None


class MemoryMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Recall into each model call, write the final turn back after the agent.

    The entity is ``"{tenant_id}:{user_id}"`` from the runtime context (attributes or keys;
    just ``user_id`` when there is no tenant, so two tenants' users with the same id never
    meet), the session the run's ``thread_id``. ``max_facts`` and ``max_fact_chars`` bound
    what is injected; ``recall_timeout`` (seconds) is the recall deadline. A context whose
    ``memtap`` field is false turns memory off for that run; ``enabled=False`` for all runs.
    """

    def __init__(
        self,
        memory: Memory,
        *,
        max_facts: int = 5,
        max_fact_chars: int = 500,
        recall_timeout: float = 0.5,
        min_score: float = 0.0,
        enabled: bool = True,
        write_back: bool = True,
    ) -> None:
        super().__init__()
        self.memory = memory
        self.max_facts = max_facts
        self.max_fact_chars = max_fact_chars
        self.recall_timeout = recall_timeout
        self.min_score = min_score
        self.enabled = enabled
        self.write_back = write_back
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="memtap-recall")

    # -- attribution ---------------------------------------------------------------------

    def who(self, context: Any) -> Who:
        """Attribution for a run with this runtime ``context``."""
        user = _field(context, "user_id")
        tenant = _field(context, "tenant_id")
        switch = _field(context, SWITCH_KEY)
        entity = None
        if user is not None:
            entity = f"{tenant}:{user}" if tenant is not None else str(user)
        return Who(entity_id=entity, session_id=_thread_id(), enabled=self.enabled and switch is not False)

    # -- recall --------------------------------------------------------------------------

    def _recall(self, query: str, entity_id: str | None) -> list[ScoredFact]:
        """Full recall if it finishes within ``recall_timeout``; otherwise (a cold index, the
        embedding model still loading) what words alone find now, while the full recall
        finishes in the background and warms up the next call."""
        entity = entity_id or self.memory.current_attribution().entity_id
        full = self._pool.submit(self.memory.recall, query, entity_id=entity, k=self.max_facts)
        try:
            return full.result(timeout=self.recall_timeout)
        except concurrent.futures.TimeoutError:
            return self.memory.recall(query, entity_id=entity, k=self.max_facts, deadline=0.0)

    def _block(self, facts: list[ScoredFact], request: ModelRequest) -> str | None:
        said = {latest_user_text(request.messages) or ""}
        lines = []
        for fact in facts:
            if fact.score < self.min_score or fact.text in said:
                continue
            text = (
                fact.text if len(fact.text) <= self.max_fact_chars else fact.text[: self.max_fact_chars] + "…"
            )
            lines.append(f"- {text}")
        if not lines:
            return None
        return render_blocks([SystemBlock(text="\n".join(lines[: self.max_facts]), source="langchain")])

    def _with_block(self, request: ModelRequest, block: str) -> ModelRequest:
        system = request.system_message
        if system is None:
            return request.override(system_message=SystemMessage(content=block))
        content = system.content
        if isinstance(content, str):
            new_content: Any = f"{content}\n\n{block}" if content else block
        else:
            new_content = [*content, {"type": "text", "text": block}]
        return request.override(system_message=SystemMessage(content=new_content))

    def _prepared(self, request: ModelRequest, facts: list[ScoredFact]) -> ModelRequest:
        block = self._block(facts, request)
        return request if block is None else self._with_block(request, block)

    def _query(self, request: ModelRequest) -> tuple[str, Who] | None:
        who = self.who(request.runtime.context if request.runtime is not None else None)
        query = latest_user_text(request.messages)
        if not who.enabled or not query:
            return None
        return query, who

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        """Add recalled facts to this model call's system message only."""
        try:
            found = self._query(request)
            if found is not None:
                query, who = found
                request = self._prepared(request, self._recall(query, who.entity_id))
        except Exception as exc:
            log.warning("memtap recall skipped for this model call: %s: %s", type(exc).__name__, exc)
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        """The async form of :meth:`wrap_model_call`."""
        try:
            found = self._query(request)
            if found is not None:
                query, who = found
                facts = await asyncio.to_thread(self._recall, query, who.entity_id)
                request = self._prepared(request, facts)
        except Exception as exc:
            log.warning("memtap recall skipped for this model call: %s: %s", type(exc).__name__, exc)
        return await handler(request)

    # -- write-back ----------------------------------------------------------------------

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Queue the run's final user/assistant turn for storage (never raises)."""
        try:
            who = self.who(getattr(runtime, "context", None))
            if not (who.enabled and self.write_back):
                return None
            messages = state.get("messages", []) if isinstance(state, Mapping) else []
            user_turn, answer = final_turn(messages)
            if user_turn:
                self.memory.capture(
                    user_turn,
                    answer,
                    entity_id=who.entity_id,
                    session_id=who.session_id,
                    provider="langchain",
                )
        except Exception as exc:
            log.warning("memtap could not write back the agent's turn: %s: %s", type(exc).__name__, exc)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The async form of :meth:`after_agent` (queuing never blocks)."""
        return self.after_agent(state, runtime)
