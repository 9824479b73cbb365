"""History's default plugin: the injector of a session's earlier turns (registered by each
:class:`memtap.Memory`, bound to its session histories)."""

from __future__ import annotations

from collections.abc import Awaitable

from memtap.history.conversation import HistoryBudget, HistoryPlan, cached_plan, resent_count
from memtap.history.injector import SessionHistories, request_budget
from memtap.protocol.markers import hookimpl
from memtap.protocol.wire import HistoryInjection, InjectionRequest

__all__ = ["HistoryPlugin"]


class HistoryPlugin:
    """Core's default injector: puts the session's earlier turns in front of the request
    (those the request does not resend or carry, whole answered tool units, within the
    budget), and tells the capture path how many of the request's messages resend stored
    ones."""

    def __init__(self, histories: SessionHistories, budget: HistoryBudget) -> None:
        self.histories = histories
        self.budget = budget

    def plan(self, request: InjectionRequest) -> HistoryPlan:
        """The history plan of ``request`` (made once per request, whoever asks)."""
        history = self.histories.get(request.attribution)
        return cached_plan(history, request.request.messages, request_budget(request, self.budget))

    @hookimpl
    def memtap_request_prefetch(self, request: InjectionRequest) -> Awaitable[None]:
        """On an event loop: the session's read from the store, awaited up to its deadline
        (:meth:`SessionHistories.preload`), so that the injections find it cached."""
        return self.histories.preload(request.attribution)

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
