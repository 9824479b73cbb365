"""The request path of one intercepted call, as provider adapters drive it.

An adapter's patched method calls :meth:`Tap.begin` to get a :class:`Call`, runs the SDK's
own method inside :meth:`Call.active`, and has the SDK's body-building step call
:meth:`Call.prepare` (which injects). Then it reports the outcome: :meth:`Call.succeeded`,
:meth:`Call.failed`, or for streams :meth:`Call.stream_item` per event and
:meth:`Call.stream_finished` once. Then the call hands capture a plain record of itself
(:class:`memtap.capture.finished.FinishedCall`): everything after the response is capture's,
journaled at once and formatted by the writer. Every step fails open: a memtap error is
logged and the call goes on.
:func:`memtap.adapters.tracked.tracked` drives these steps for an adapter's patched method.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from memtap import telemetry
from memtap.capture.finished import FinishedCall, captured
from memtap.capture.spool import RequestJournal, Spool, journal_request
from memtap.capture.writer import CapturedCall, CaptureWriter
from memtap.errors import ForkedMemoryError
from memtap.formats.scaffolding import own_view
from memtap.history.injector import SessionHistories, without_waiting
from memtap.metrics import count
from memtap.plugins import agent_profiles
from memtap.protocol.anchors import AgentProfile, detect_profile
from memtap.protocol.model import Attribution, Message, new_id, utcnow
from memtap.protocol.wire import (
    HistoryInjection,
    InjectionPlan,
    InjectionRequest,
    RequestView,
    SystemBlock,
    WireProtocol,
)
from memtap.redact import redact_text
from memtap.request.rejection import Classifier, describe, is_validation_rejection
from memtap.request.scope import AttributionScopes, in_internal_call
from memtap.request.sessionblocks import SessionBlocks
from memtap.storage.store import exchange_messages
from memtap.workers.background import call_ended, call_started

if TYPE_CHECKING:
    import pluggy

log = logging.getLogger("memtap.request.tap")

_active_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("memtap_active_call", default=None)

JsonFn = Callable[[Any], Mapping[str, Any] | None]

_UNTRACKED_REASONS: set[str] = set()
#: Protocols whose provider has rejected a request memtap changed (logged once each).
_REJECTED_PROTOCOLS: set[str] = set()

T = TypeVar("T")


def active_call() -> Call | None:
    """The call whose SDK method is running in this context, if any."""
    return _active_call.get()


def merge_injections(injections: Sequence[Sequence[Any] | None]) -> InjectionPlan:
    """Merge every injector's contribution into one plan (history in hook order, system
    blocks by slot then priority)."""
    history: list[Message] = []
    blocks: list[SystemBlock] = []
    present = 0
    later: list[Callable[[], int]] = []
    for contribution in injections:
        for item in contribution or ():
            if isinstance(item, HistoryInjection):
                history.extend(item.messages)
                present = max(present, item.already_present)
                if item.resent_later is not None:
                    later.append(item.resent_later)
            elif isinstance(item, SystemBlock):
                blocks.append(item)
    blocks.sort(key=lambda b: (b.slot, b.priority))
    return InjectionPlan(
        history=history, system_blocks=blocks, already_present=present, resent_later=tuple(later)
    )


class _Undetected(enum.Enum):
    """The agent profile of a call is not known yet (``None`` is a known answer: no
    profile recognises the request)."""

    UNDETECTED = "undetected"


UNDETECTED = _Undetected.UNDETECTED


class Tap:
    """The services a provider adapter needs from a :class:`memtap.Memory`."""

    def __init__(
        self,
        *,
        hook: pluggy.HookRelay,
        scopes: AttributionScopes,
        histories: SessionHistories,
        writer: CaptureWriter,
        register_client: Callable[[Any], Callable[[], None]] | None = None,
        spool: Spool | None = None,
        agent: str | None = None,
        register_derived: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self.hook = hook
        #: The Memory's attribution (defaults and scopes) its calls get.
        self.scopes = scopes
        self.histories = histories
        self.writer = writer
        self._register_client = register_client
        self._register_derived = register_derived
        #: The durable spool every finished call is journaled to (``None``: not durable).
        self.spool = spool
        #: The agent profile named for every call (``None``: recognised by system prompt).
        self.agent = agent
        #: The ``session_init`` blocks kept per session.
        self.session_blocks = SessionBlocks()
        self._profiles: list[AgentProfile] | None = None
        #: The process that made this tap and its Memory (a fork of it passes calls
        #: through, and its Memory refuses to read or write memory).
        self.pid = os.getpid()
        self._told_fork: int | None = None

    def forked_away(self) -> bool:
        """Whether this process is a fork of the one that made this tap: its Memory's
        store, spool and threads are the parent's, so calls pass through without memory
        (said once per process, at the first call)."""
        pid = os.getpid()
        if pid == self.pid:
            return False
        if self._told_fork != pid:
            self._told_fork = pid
            log.warning(
                "memtap: %s; this call and the next ones go to the provider unchanged and are not stored",
                ForkedMemoryError.refusing("memory for LLM calls", self.pid, pid),
            )
        return True

    @property
    def default_attribution(self) -> Attribution:
        """The attribution of calls outside any scope."""
        return self.scopes.default

    @property
    def profiles(self) -> list[AgentProfile]:
        """The agent profiles of every plugin (``memtap_agent_profiles``), read once."""
        if self._profiles is None:
            self._profiles = agent_profiles(self.hook)
        return self._profiles

    def profile(self, name: str | None, system: str | None) -> AgentProfile | None:
        """The profile named ``name`` (else :attr:`agent`), else the one whose fingerprint
        ``system`` matches, else ``None``."""
        profiles = self.profiles
        if not profiles:
            return None
        return detect_profile(profiles, system, name=name or self.agent)

    def register_client(self, client: Any) -> Callable[[], None]:
        """Register another client with the same Memory (for adapters of objects that wrap
        SDK clients, such as framework chat models); returns the function undoing it. A
        client the application registered itself stays registered after the undo."""
        if self._register_client is None:
            raise RuntimeError("this Tap cannot register clients")
        return self._register_client(client)

    def register_derived(self, parent: Any, client: Any) -> None:
        """Tap ``client``, which the registered ``parent`` just made (``with_options()``,
        ``copy()``...), with the same Memory; it is held weakly and unregistered with its
        parent. Adapters call this from their wrapper of the SDK's derivation method."""
        if self._register_derived is not None:
            self._register_derived(parent, client)

    def begin(
        self,
        protocol: WireProtocol,
        *,
        fallback_body: Mapping[str, Any] | None = None,
        attribution: Attribution | None = None,
        agent: str | None = None,
        profile: AgentProfile | _Undetected | None = UNDETECTED,
        history: bool = True,
    ) -> Call:
        """Start one call in ``protocol``, attributed to the current scope, or to
        ``attribution`` when the caller attributes each call itself (a server).

        ``fallback_body`` is used for capture when the SDK never reached
        :meth:`Call.prepare` (e.g. an SDK version whose internals moved). ``agent``,
        ``profile`` and ``history`` are :class:`Call`'s.
        """
        return Call(
            self,
            protocol,
            self.scopes.current() if attribution is None else attribution,
            fallback_body,
            agent=agent,
            profile=profile,
            history=history,
        )


class Call:
    """One intercepted LLM call.

    ``agent`` names the agent profile placing blocks in the system prompt (the proxy's URL
    prefix); without it the tap's own, else the one recognised by the system prompt.
    ``profile`` is that profile when the caller has already looked for it (the proxy:
    once per request; ``None`` when none recognised the request), else found on first
    use. ``history=False`` injects no history (the caller holds its whole
    conversation: an agent that resends it every turn); what the request repeats of the
    session is still recognised and not captured twice.
    """

    def __init__(
        self,
        tap: Tap,
        protocol: WireProtocol,
        attribution: Attribution,
        fallback_body: Mapping[str, Any] | None,
        *,
        agent: str | None = None,
        profile: AgentProfile | _Undetected | None = UNDETECTED,
        history: bool = True,
    ) -> None:
        self.tap = tap
        self.agent = agent
        self._profile_known = profile is not UNDETECTED
        self.profile: AgentProfile | None = None if isinstance(profile, _Undetected) else profile
        self.history = history
        #: The client instance the call was made through: the adapter sets it when the call
        #: begins, and its body-building hook prepares only the calls of its own client.
        self.owner: object | None = None
        #: The model a request names in its URL rather than its body (Gemini), set by the
        #: adapter so that capture records it.
        self.url_model: str | None = None
        #: What the adapter keeps for this call between the ``begin``, ``attempt`` and
        #: ``outcome`` of its tracked method (:func:`memtap.adapters.tracked.tracked`), such as the
        #: request in the SDK's own form, rebuilt around the body to send. memtap never
        #: reads it.
        self.adapter_state: Any = None
        self.protocol = protocol
        self.attribution = attribution
        self.id = new_id()
        self.started_at = utcnow()
        self.app_body: Mapping[str, Any] | None = fallback_body
        self.sent_body: Mapping[str, Any] | None = None
        #: The app's request as injection read it (the agent's scaffolding left out).
        self.request_view: RequestView | None = None
        #: The last body read and its reading; the last reading and what the injectors
        #: were asked of it (a call prepared on an event loop asks twice: prefetch, inject).
        self._read: tuple[Mapping[str, Any], RequestView] | None = None
        self._request: tuple[RequestView, InjectionRequest] | None = None
        #: How many of the request's leading messages resend the session (not captured
        #: again); final once the call is formatted (:attr:`resent_later`).
        self.already_present = 0
        #: Counts of resent messages left to be made when the call is formatted
        #: (:attr:`memtap.protocol.wire.HistoryInjection.resent_later`).
        self.resent_later: tuple[Callable[[], int], ...] = ()
        self.injected_messages = 0
        #: What was injected (kept by reference; recorded with the exchange by the capture
        #: writer: :mod:`memtap.capture.explanation`); ``None`` once the app's own body was sent.
        self.injection: InjectionPlan | None = None
        self.hide_usage_event = False
        #: The finished call as queued for storage (``None``: not captured, or not yet).
        self.captured: CapturedCall | None = None
        #: The integration formats the finished call itself once its answer is out
        #: (:meth:`format_captured`): the thread finishing the call does not, even with
        #: ``Memory.format_in_caller``. For a server that finishes a call before its
        #: answer's last bytes go out (``memtap proxy``: journaled before answered), so
        #: that the answer does not wait for the formatting. Never formatted by then, the
        #: capture writer formats it.
        self.format_after_answer = False
        #: Ask a stream for its usage only when memtap changes the request anyway (the
        #: proxy: an agent's bytes go unchanged when nothing is injected); else always.
        self.usage_with_injection_only = False
        #: The request half of this call's spool record, made while the call is in flight
        #: (``None``: no spool, or a body small or known enough to be journaled whole when
        #: the answer comes).
        self.journal: RequestJournal | None = None
        #: Send the app's body unchanged from now on (the provider rejected memtap's).
        self.plain = False
        #: Whether the request was sent again without memtap's changes.
        self.resent = False
        self._stream_items: list[Any] = []
        #: memtap's own LLM work (memorize), or a call in a fork of the process that made
        #: the tap: neither injected into nor captured.
        self.internal = in_internal_call() or tap.forked_away()
        self._finished = threading.Lock()
        call_started()  # ended by whichever of failed / untracked / _capture comes first
        self.span = telemetry.tracer().start_span(
            protocol.operation,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": protocol.operation,
                "gen_ai.provider.name": protocol.provider,
                "gen_ai.conversation.id": attribution.session_id,
            },
        )

    @contextmanager
    def active(self) -> Iterator[Call]:
        """Make this the active call while the SDK method runs (for :meth:`prepare`)."""
        token = _active_call.set(self)
        ctx_token = otel_context.attach(trace.set_span_in_context(self.span))
        try:
            yield self
        finally:
            otel_context.detach(ctx_token)
            _active_call.reset(token)

    # -- request -------------------------------------------------------------------------

    def prepare(self, body: Mapping[str, Any], *, view: RequestView | None = None) -> Mapping[str, Any]:
        """Given the body the SDK built from the app's arguments, return the body to send.

        ``view`` is the protocol's reading of ``body`` when the caller has made it already,
        with the agent's scaffolding left out (:func:`memtap.formats.scaffolding.own_view` with
        this call's profile). Called again with the same body on retries: the same result
        is returned. After the provider rejected what memtap sent (:meth:`send`), the app's
        body is returned as it is.
        """
        if self.plain:
            self.app_body = self.sent_body = body
            self.hide_usage_event = False
            self.injection = None
            return body
        if self.sent_body is not None and body is self.app_body:
            return self.sent_body
        self.app_body = body
        if self.internal:
            self.sent_body = body
            return body
        sent: Mapping[str, Any] = body
        try:
            sent = self._inject(body, view)
        except Exception:
            count("failed", reason="inject")
            log.exception(
                "memtap could not inject into a %s request; sending it unchanged", self.protocol.name
            )
            sent = body
        self.sent_body = sent
        self.journal = journal_request(self.tap.spool, self, body)
        return sent

    async def prepare_async(
        self, body: Mapping[str, Any], *, view: RequestView | None = None
    ) -> Mapping[str, Any]:
        """:meth:`prepare` for a caller on an event loop: what the injectors would wait for
        (the session's history read from the store, the full model's vector of the
        question) is awaited first, a bounded time (``memtap_request_prefetch``), so the
        loop never blocks on it."""
        if self.internal or self.sent_body is not None or self.plain:
            return self.prepare(body, view=view)
        import asyncio  # on a coroutine's first use, not at `import memtap` (the command line)

        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): prepare's own bounded wait applies
            return self.prepare(body, view=view)
        await self._prefetch(body, view)
        with without_waiting():
            return self.prepare(body, view=view)

    async def _prefetch(self, body: Mapping[str, Any], given: RequestView | None) -> None:
        """Await what the injectors would wait for (``memtap_request_prefetch``), one after
        the other in this task, so that the loop serves other calls meanwhile."""
        try:
            request = self._injection_request(self._view(body, given), given)
            waits = [w for w in self.tap.hook.memtap_request_prefetch(request=request) if w is not None]
        except Exception:
            count("failed", reason="prefetch")
            log.exception("memtap could not start what its injectors wait for; they go on without")
            return
        for wait in waits:
            try:
                await wait
            except Exception:
                count("failed", reason="prefetch")
                log.exception("a memtap_request_prefetch wait failed; its injector goes on without")

    def _view(self, body: Mapping[str, Any], given: RequestView | None) -> RequestView:
        """The protocol's reading of ``body`` (``given``, else read once per body)."""
        if given is not None:
            return given
        read = self._read
        if read is not None and read[0] is body:
            return read[1]
        view = self.protocol.read_request(body)
        self._read = (body, view)
        return view

    def _inject(self, body: Mapping[str, Any], given: RequestView | None) -> Mapping[str, Any]:
        view = self._view(body, given)
        # Spans and their attributes only for a call whose span is recorded (an SDK is set
        # up and samples it): without one, each costs work on every call for nothing.
        if not self.span.is_recording():
            sent = self._planned(body, view, given)
        else:
            if view.model:
                self.span.update_name(f"{self.protocol.operation} {view.model}")
                self.span.set_attribute("gen_ai.request.model", view.model)
            with telemetry.tracer().start_as_current_span("memtap.inject") as span:
                sent = self._planned(body, view, given)
                if self.profile is not None:
                    span.set_attribute("memtap.agent", self.profile.name)
                plan = self.injection
                span.set_attribute("memtap.injected.messages", len(plan.history) if plan else 0)
                span.set_attribute("memtap.injected.blocks", len(plan.system_blocks) if plan else 0)
        if view.stream and (sent is not body or not self.usage_with_injection_only):
            with_usage = self.protocol.request_stream_usage(sent)
            if with_usage is not None:
                sent = with_usage
                self.hide_usage_event = True
        return sent

    def _planned(
        self, body: Mapping[str, Any], view: RequestView, given: RequestView | None
    ) -> Mapping[str, Any]:
        """``body`` with what the injectors contribute (the plan kept on the call)."""
        tap = self.tap
        request = self._injection_request(view, given)
        profile = self.profile
        self.request_view = request.request
        plan = merge_injections(tap.hook.memtap_request_injections(request=request))
        plan = tap.session_blocks.apply(self.attribution, plan)
        if profile is not None:
            plan = attrs.evolve(plan, profile=profile)
        self.already_present = plan.already_present
        self.resent_later = plan.resent_later
        self.injected_messages = len(plan.history)
        self.injection = plan
        return body if plan.empty else self.protocol.inject(body, plan)

    def _injection_request(self, view: RequestView, given: RequestView | None) -> InjectionRequest:
        """What the injectors are asked about ``view`` (made once per view: the prefetch
        and the injections get the same object)."""
        made = self._request
        if made is not None and made[0] is view:
            return made[1]
        if not self._profile_known:
            self.profile = self.tap.profile(self.agent, view.system)
            self._profile_known = True
        profile = self.profile
        request = InjectionRequest(
            attribution=self.attribution,
            protocol=self.protocol,
            # The agent's scaffolding is not the user.
            request=own_view(profile, view) if given is None else given,
            agent=profile.name if profile is not None else None,
            cached_sources=self.tap.session_blocks.sources(self.attribution),
            history=self.history,
        )
        self._request = (view, request)
        return request

    # -- sending -------------------------------------------------------------------------

    @property
    def changed(self) -> bool:
        """Whether memtap changed the body it sent (injected, or asked for stream usage)."""
        return self.sent_body is not None and self.sent_body is not self.app_body

    @property
    def may_resend(self) -> bool:
        """Whether a rejection of this call would be sent again (memtap changed the request,
        and has not sent it again yet)."""
        return self.changed and not self.resent and not self.internal

    def resend_after(self, exc: BaseException, rejected: Classifier = is_validation_rejection) -> bool:
        """Whether to send the request again as the application built it: the provider
        rejected it as invalid (``rejected(exc)``: HTTP 400/422 by default) and memtap had
        changed it, and it has not been sent again yet. If so, :meth:`prepare` returns the
        app's own body from now on; the rejection is counted (``memtap.failures``, reason
        ``rejected``) and logged once per protocol. Adapters whose request is not a single
        call (a stream that fails on its first read) use this; others use :meth:`send`."""
        try:
            if not self.may_resend or not rejected(exc):
                return False
        except Exception:
            log.debug("rejection classifier failed", exc_info=True)
            return False
        self.resent = self.plain = True
        self.injection = None
        self.hide_usage_event = False  # the app's own request asks for what it asks for
        count("failed", reason="rejected")
        self.span.add_event("memtap.resent", {"memtap.request.rejection": describe(exc)})
        self.span.set_attribute("memtap.resent", True)
        name = self.protocol.name
        if name not in _REJECTED_PROTOCOLS:
            _REJECTED_PROTOCOLS.add(name)
            log.warning(
                "memtap: the provider rejected a request memtap had changed (%s, %s); it was "
                "sent again as the application built it, without memory (logged once per "
                "protocol; counted as memtap.failures reason=rejected)",
                name,
                describe(exc),
            )
        return True

    def send(self, attempt: Callable[[], T], *, rejected: Classifier = is_validation_rejection) -> T:
        """Run ``attempt()`` (the SDK's own call, which reaches :meth:`prepare`) as this call;
        if the provider rejects what memtap changed, run it once more without memtap's
        changes (:meth:`resend_after`). An error that is not retried is recorded with
        :meth:`failed` and raised."""
        with self.active():
            try:
                return attempt()
            except BaseException as exc:
                if not self.resend_after(exc, rejected):
                    self.failed(exc)
                    raise
            # Outside the except block: the second attempt's error is not chained to the first.
            try:
                return attempt()
            except BaseException as exc:
                self.failed(exc)
                raise

    async def send_async(
        self, attempt: Callable[[], Awaitable[T]], *, rejected: Classifier = is_validation_rejection
    ) -> T:
        """The async form of :meth:`send` (``attempt()`` returns a new awaitable each time)."""
        with self.active():
            try:
                return await attempt()
            except BaseException as exc:
                if not self.resend_after(exc, rejected):
                    self.failed(exc)
                    raise
            try:
                return await attempt()
            except BaseException as exc:
                self.failed(exc)
                raise

    # -- outcome -------------------------------------------------------------------------

    def succeeded(self, response: Any, to_json: JsonFn) -> None:
        """A non-streamed call returned ``response``; capture it (converted later)."""
        # Converted once: by the journal on the request path when there is a spool (the
        # writer then reads what it made; neither changes it), else by the writer.
        self._capture(functools.cache(lambda: to_json(response)), None, error=None, partial=False)

    def failed(self, exc: BaseException) -> None:
        """The call raised before a response: nothing is stored, the span records it."""
        if not self._finished.acquire(blocking=False):
            return
        call_ended()
        try:
            telemetry.record_exception(self.span, exc)
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            self.span.set_attribute("error.type", type(exc).__qualname__)
            self.span.end()
        except Exception:
            log.debug("span error", exc_info=True)

    @property
    def stream_requested(self) -> bool:
        """Whether the app's body asked for a streamed response."""
        body = self.app_body
        return bool(body is not None and body.get("stream"))

    def untracked(self, reason: str) -> None:
        """The call went through but its response cannot be captured: end the span and
        log why (once per reason), store nothing."""
        if not self._finished.acquire(blocking=False):
            return
        call_ended()
        if reason not in _UNTRACKED_REASONS:
            _UNTRACKED_REASONS.add(reason)
            log.warning("memtap: %s", reason)
        self.span.set_attribute("memtap.untracked", reason)
        self.span.end()

    def stream_item(self, item: Any) -> None:
        """One streamed event passed to the caller (kept; read after the stream ends)."""
        self._stream_items.append(item)

    def capture_expected(self) -> AbstractContextManager[None]:
        """While the block runs, ``Memory.flush()`` waits for this call's capture. For a
        caller that writes the answer's last bytes before it finishes the call: an app that
        has read them and flushes must find the call stored."""
        return self.tap.writer.expecting()

    def stream_finished(
        self, to_json: JsonFn, *, error: BaseException | None = None, partial: bool = False
    ) -> None:
        """The stream ended, was closed or abandoned early (``partial``), or failed
        (``error``). Only the first report counts."""
        items = self._stream_items
        events = functools.cache(lambda: [to_json(item) for item in items])  # once, as in succeeded()
        message = redact_text(f"{type(error).__name__}: {error}") if error is not None else None
        self._capture(None, events, error=message, partial=partial)

    def format_captured(self) -> None:
        """Format the finished call into its exchange now, in this thread (done once:
        nothing if it is formatted already, or was not captured). For an integration that
        set :attr:`format_after_answer`, once the answer is out; a failure is logged, never
        raised (the call is then not stored, as in the writer)."""
        item = self.captured
        if item is not None:
            item.exchange()

    def _capture(
        self,
        response: Callable[[], Mapping[str, Any] | None] | None,
        events: Callable[[], Sequence[Mapping[str, Any] | None]] | None,
        *,
        error: str | None,
        partial: bool,
    ) -> None:
        """Hand the finished call to capture (:mod:`memtap.capture.finished`): journaled
        now, formatted and stored by the writer; its messages join the session's history."""
        if not self._finished.acquire(blocking=False):
            return
        call_ended()
        if self.internal:
            self.span.end()
            return
        tap = self.tap
        finished = FinishedCall(
            protocol=self.protocol,
            attribution=self.attribution,
            id=self.id,
            request_body=self.app_body,
            request_view=self.request_view,
            started_at=self.started_at,
            ended_at=utcnow(),
            ended_ns=time.time_ns(),
            span=self.span,
            response=response,
            events=events,
            error=error,
            partial=partial,
            already_present=self.already_present,
            resent_later=self.resent_later,
            injection=self.injection,
            profile=self.profile,
            profile_known=self._profile_known,
            # Looked for when the call is formatted (a call that never reached prepare).
            profiles=() if self._profile_known else tap.profiles,
            agent=self.agent or tap.agent,
            journal=self.journal,
        )
        item = captured(finished, tap.hook, tap.spool)
        if tap.writer.format_in_caller and not self.format_after_answer:
            item.exchange()
        self.captured = item
        try:
            tap.histories.append(self.attribution, lambda: _messages(item), self.id)
            tap.writer.submit(item)
        except Exception:
            log.exception("memtap could not queue a captured call")


def _messages(item: CapturedCall) -> Sequence[Message]:
    ex = item.formatted()
    return exchange_messages(ex) if ex is not None else ()
