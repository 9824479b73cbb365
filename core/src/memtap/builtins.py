"""Core's own default behaviour, registered as plugins through the same hooks as any other.

- ``payload``: formats a raw call into an :class:`~memtap.protocol.model.Exchange` through its
  wire protocol (last resort, so a provider plugin may format its own calls).
- ``redact``: a wrapper around every formatter that removes secrets from what is stored
  (the detectors live in :mod:`memtap.redact`).
- ``accumulator``: a stream's accumulator is its protocol's, unless a plugin says otherwise.
- ``memory-store``: answers ``memory://`` with the in-process reference store.
- ``litellm-embedder``: answers the embedder spec ``litellm:<model>`` (remote embeddings).
- ``history``: injects the session's earlier turns (:class:`HistoryPlugin`).
- ``recall``: injects the entity's recalled facts (:class:`~memtap.longterm.recall_injector.RecallPlugin`).

Every built-in is built here: :func:`builtin_plugins` (the stateless ones, in every plugin
manager) and :func:`memory_plugins` (the injectors bound to one Memory's state).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pluggy

from memtap.history.conversation import HistoryBudget, HistoryPlan, cached_plan, resent_count
from memtap.history.injector import SessionHistories, request_budget
from memtap.hookspecs import hookimpl
from memtap.longterm.litellm_embedder import LITELLM_PREFIX, LiteLLMEmbedder
from memtap.longterm.recall import RecallEngine
from memtap.longterm.recall_injector import RecallBudget, RecallPlugin
from memtap.protocol.embedder import Embedder
from memtap.protocol.model import AGENT_KEY, Exchange, ExchangeStatus, new_id
from memtap.protocol.wire import (
    HistoryInjection,
    InjectionRequest,
    RawExchange,
    ResponseView,
    StreamAccumulator,
    WireProtocol,
)
from memtap.redact import REDACTED, redact_exchange, redact_fact, redact_text
from memtap.request.scaffolding import own_view
from memtap.storage.store import InMemoryStore, Store

__all__ = [
    "AGENT_KEY",
    "REDACTED",
    "AccumulatorPlugin",
    "HistoryPlugin",
    "LiteLLMEmbedderPlugin",
    "MemoryStorePlugin",
    "PayloadPlugin",
    "RedactPlugin",
    "builtin_plugins",
    "default_accumulator",
    "memory_plugins",
    "redact_exchange",
    "redact_fact",
    "redact_text",
    "stream_accumulator",
]


class PayloadPlugin:
    """Default ``memtap_format_exchange``: read request and response via the protocol."""

    @hookimpl(trylast=True)
    def memtap_format_exchange(self, raw: RawExchange) -> Exchange:
        """Build the canonical exchange; the app's messages minus those it repeated (and
        minus its agent's scaffolding)."""
        request = raw.request_view
        if request is None:
            request = own_view(raw.profile, raw.protocol.read_request(raw.request_body))
        if raw.stream_result is not None:
            response = raw.stream_result
        elif raw.response is not None:
            response = raw.protocol.read_response(raw.response)
        else:
            response = ResponseView()
        status: ExchangeStatus = "error" if raw.error else "partial" if raw.partial else "ok"
        return Exchange(
            id=raw.id or new_id(),
            attribution=raw.attribution,
            provider=raw.protocol.provider,
            operation=raw.protocol.operation,
            input=request.messages[raw.already_present :],
            output=response.messages,
            system=request.system,
            request_model=request.model,
            response_model=response.model,
            usage=response.usage,
            finish_reasons=response.finish_reasons,
            stream=raw.stream,
            status=status,
            error=raw.error,
            started_at=raw.started_at,
            ended_at=raw.ended_at,
            metadata={AGENT_KEY: raw.profile.name} if raw.profile is not None else {},
        )


class RedactPlugin:
    """Wraps every exchange formatter and removes secrets from the result."""

    @hookimpl(wrapper=True)
    def memtap_format_exchange(self, raw: RawExchange) -> Generator[None, Any, Exchange | None]:
        """Redact whatever the formatters produced."""
        exchange: Exchange | None = yield
        return None if exchange is None else redact_exchange(exchange)


def default_accumulator(protocol: WireProtocol) -> StreamAccumulator:
    """The default accumulator of a stream in ``protocol``: the protocol's own."""
    return protocol.new_accumulator()


def stream_accumulator(hook: pluggy.HookRelay, protocol: WireProtocol) -> StreamAccumulator:
    """A fresh accumulator for one stream in ``protocol``: the ``memtap_stream_accumulator``
    hook's answer (``hook`` is a plugin manager's ``hook``), else the default (the
    ``accumulator`` built-in may be disabled)."""
    found: StreamAccumulator | None = hook.memtap_stream_accumulator(protocol=protocol)
    return found if found is not None else default_accumulator(protocol)


class AccumulatorPlugin:
    """Default ``memtap_stream_accumulator``: the protocol's own."""

    @hookimpl(trylast=True)
    def memtap_stream_accumulator(self, protocol: WireProtocol) -> StreamAccumulator:
        """Return ``protocol.new_accumulator()``."""
        return default_accumulator(protocol)


class MemoryStorePlugin:
    """Answers ``memory://`` store URLs with :class:`~memtap.storage.store.InMemoryStore`."""

    @hookimpl
    def memtap_open_store(self, url: str) -> Store | None:
        """Open an in-process store for ``memory://`` URLs."""
        return InMemoryStore(url) if url.startswith("memory://") else None

    @hookimpl
    def memtap_store_schemes(self) -> list[str]:
        """``memory``."""
        return ["memory"]


class LiteLLMEmbedderPlugin:
    """Built-in answer to ``memtap_embedder`` for ``litellm:<model>`` specs."""

    @hookimpl(trylast=True)
    def memtap_embedder(self, spec: str) -> Embedder | None:
        """A :class:`LiteLLMEmbedder` for ``litellm:<model>``."""
        if spec.startswith(LITELLM_PREFIX) and len(spec) > len(LITELLM_PREFIX):
            return LiteLLMEmbedder(spec[len(LITELLM_PREFIX) :])
        return None


class HistoryPlugin:
    """Built-in injector: puts the session's earlier turns in front of the request (those
    the request does not resend or carry, whole answered tool units, within the budget), and
    tells the capture path how many of the request's messages resend stored ones."""

    def __init__(self, histories: SessionHistories, budget: HistoryBudget) -> None:
        self.histories = histories
        self.budget = budget

    def plan(self, request: InjectionRequest) -> HistoryPlan:
        """The history plan of ``request`` (made once per request, whoever asks)."""
        history = self.histories.get(request.attribution)
        return cached_plan(history, request.request.messages, request_budget(request, self.budget))

    @hookimpl
    def memtap_request_injections(self, request: InjectionRequest) -> list[HistoryInjection]:
        """Inject the budgeted part of the session history the request does not repeat
        (none when ``request.history`` is off or the budget is zero: then only what it
        repeats is reported, counted where the call is formatted)."""
        if request_budget(request, self.budget).off:
            # Nothing to inject: what the request resends is counted by the capture writer,
            # against the session as it is now. The previous call of the session, which the
            # count reads, is formatted there in its turn, not first on this request's path.
            history_now = self.histories.snapshot(request.attribution)
            if history_now is not None:
                own = request.request.messages

                def resent() -> int:
                    return resent_count(history_now(), own)

                return [HistoryInjection(resent_later=resent)]
        plan = self.plan(request)
        if not plan.messages and not plan.present:
            return []
        return [HistoryInjection(messages=plan.messages, already_present=plan.present)]


def builtin_plugins() -> dict[str, object]:
    """Core's stateless built-in plugins by name (every plugin manager registers fresh
    instances: :func:`memtap.plugins.make_plugin_manager`)."""
    return {
        "payload": PayloadPlugin(),
        "redact": RedactPlugin(),
        "accumulator": AccumulatorPlugin(),
        "memory-store": MemoryStorePlugin(),
        "litellm-embedder": LiteLLMEmbedderPlugin(),
    }


def memory_plugins(
    histories: SessionHistories,
    history_budget: HistoryBudget,
    recall_engine: RecallEngine,
    recall_budget: RecallBudget,
) -> dict[str, object]:
    """The built-in injectors of one :class:`memtap.Memory` by name, bound to its session
    histories and recall engine (it registers them once those exist)."""
    return {
        "history": HistoryPlugin(histories, history_budget),
        "recall": RecallPlugin(recall_engine, histories, history_budget, recall_budget),
    }
