"""The contracts between core and provider plugins: wire protocols, client adapters,
injections and stream accumulators.

A :class:`WireProtocol` knows one request/response format (OpenAI Chat Completions, OpenAI
Responses, Anthropic Messages, ...) at the level of the JSON that goes over the wire. Core
calls it to read a request body, to add injected blocks to it, and to read a response or a
stream of events. Working on the wire JSON (not on SDK keyword arguments) is what lets
the in-process mode inject after the SDK has built its body (cheap: no SDK re-validation of
injected messages) and the proxy reuse the very same code.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from memtap.protocol.anchors import INJECTION_POINTS, RELATIONS, AgentProfile, Anchor
from memtap.protocol.model import Attribution, Message, Usage, as_messages, as_strings


@attrs.frozen
class RequestView:
    """What core needs to know of a request body, read by :meth:`WireProtocol.read_request`.

    ``messages`` are the conversation messages in order (system messages excluded);
    ``system`` is the application's system/instruction text.
    """

    messages: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)
    system: str | None = None
    model: str | None = None
    stream: bool = False


@attrs.frozen
class ResponseView:
    """What core keeps of a response: the answer, usage, finish reasons, model."""

    messages: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)
    usage: Usage = attrs.field(factory=Usage)
    finish_reasons: tuple[str, ...] = attrs.field(default=(), converter=as_strings)
    model: str | None = None


@attrs.frozen
class HistoryInjection:
    """Earlier turns to put in front of the request's messages.

    ``already_present`` counts the request's leading messages that repeat the end of the
    stored history (an app that keeps its own history resends them): they are not captured
    again. An injector that has nothing to inject may leave that count to be made where the
    call is formatted (the capture writer, off the request path), with ``resent_later``
    (returns it; called once).
    """

    messages: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)
    already_present: int = 0
    resent_later: Callable[[], int] | None = attrs.field(default=None, eq=False)


#: How a block relates to the provider's prompt cache (see :class:`SystemBlock`).
CACHE_STRATEGIES = ("per_turn", "session_init", "hybrid")


def _as_ids(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _line_count(text: str) -> int:
    return text.count("\n") + 1


@attrs.frozen
class SystemBlock:
    """Text for the place the provider reads system text, labelled as data.

    ``slot`` is the semantic slot (``"memory"``, ``"knowledge"``, ...) and ``relation``
    where the block goes relative to it (:data:`memtap.protocol.anchors.RELATIONS`) in a known
    agent's system prompt; ``point`` is where it goes otherwise (one of
    :data:`memtap.protocol.anchors.INJECTION_POINTS`; ``system.suffix``: the end of the system
    text). ``priority`` orders blocks (lower first). ``source`` names the injector.

    ``cache`` is the cache strategy: ``"per_turn"`` (computed for every request),
    ``"session_init"`` (computed once per session, then the same bytes every turn: memtap
    keeps the first one of each ``source`` + ``slot`` for the session) or ``"hybrid"``
    (both: the session's first block stays, and each turn's block adds only what that one
    lacks). ``fact_ids`` optionally names the fact on each line of ``text`` (``""`` for a
    line that is not a fact, such as a header), so the per-turn part of ``hybrid`` leaves
    out facts by id; without them it compares list-item lines.

    ``note`` is what the injector wants recorded about the block for ``memtap explain``
    (the recall injector: a :class:`memtap.capture.explanation.RecallNote` naming each fact with its
    score and score parts, and the facts it left out); it is never sent, and turned into
    the call's stored record in the background (:mod:`memtap.capture.explanation`).
    """

    text: str
    slot: str = "memory"
    priority: int = 100
    cache: str = attrs.field(default="per_turn", validator=attrs.validators.in_(CACHE_STRATEGIES))
    source: str = ""
    relation: str = attrs.field(default="inside_append", validator=attrs.validators.in_(RELATIONS))
    point: str = attrs.field(default="system.suffix", validator=attrs.validators.in_(INJECTION_POINTS))
    fact_ids: tuple[str, ...] = attrs.field(default=(), converter=_as_ids)
    note: Any = attrs.field(default=None, eq=False, repr=False)

    @fact_ids.validator
    def _check_fact_ids(self, _attribute: Any, value: tuple[str, ...]) -> None:
        if value and len(value) != _line_count(self.text):
            raise ValueError(
                f"SystemBlock.fact_ids needs one id per line of text ({_line_count(self.text)}), "
                f"got {len(value)}"
            )

    @property
    def anchor(self) -> Anchor:
        """Where the block asks to go, as an :class:`memtap.protocol.anchors.Anchor`."""
        return Anchor(slot=self.slot, relation=self.relation, point=self.point, priority=self.priority)


Injection = HistoryInjection | SystemBlock


def _as_blocks(value: Iterable[SystemBlock]) -> tuple[SystemBlock, ...]:
    return tuple(value)


@attrs.frozen
class InjectionRequest:
    """One outgoing request, as the injection hooks see it.

    ``agent`` names the agent profile placing blocks in this request's system prompt
    (``None``: none is known); ``cached_sources`` are the sources whose ``session_init``
    block this session already has: an injector may skip computing those (the kept block
    is injected either way; a ``hybrid`` one still computes what is new this turn).
    ``history`` is ``False`` when the session's earlier turns must not be injected (the
    caller holds its whole conversation, or the session is only derived from it); what
    the request repeats of the session is still to be reported (``already_present``).
    ``request.messages`` never hold the agent's scaffolding
    (:func:`memtap.formats.scaffolding.own_view`).
    """

    attribution: Attribution
    protocol: WireProtocol
    request: RequestView
    agent: str | None = None
    cached_sources: frozenset[str] = frozenset()
    history: bool = True


@attrs.frozen
class InjectionPlan:
    """Everything to inject into one request, merged from all injectors.

    ``profile`` is the agent profile whose slots the blocks are placed at (``None``: every
    block goes to its fallback point); protocols place blocks with
    :func:`memtap.formats.placement.arrange`.
    """

    history: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)
    system_blocks: tuple[SystemBlock, ...] = attrs.field(default=(), converter=_as_blocks)
    already_present: int = 0
    #: Counts of resent messages to be made where the call is formatted
    #: (:attr:`HistoryInjection.resent_later`); the largest of them and ``already_present``
    #: is what the request resends.
    resent_later: tuple[Callable[[], int], ...] = attrs.field(default=(), eq=False)
    profile: AgentProfile | None = attrs.field(default=None, eq=False)
    request_view: RequestView | None = attrs.field(default=None, eq=False)

    @property
    def empty(self) -> bool:
        """True when nothing would change the body."""
        return not self.history and not self.system_blocks


@runtime_checkable
class StreamAccumulator(Protocol):
    """Builds a response out of the events of one stream.

    ``feed`` is called with each event's JSON object as it passes; ``result`` once, at the
    end (even an early one: it returns what has arrived so far).
    """

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one stream event."""

    def result(self) -> ResponseView:
        """What the stream said, so far."""


@runtime_checkable
class WireProtocol(Protocol):
    """One LLM request/response format, at the level of its JSON."""

    #: Unique name, ``"<provider>.<api>"``, e.g. ``"openai.chat"``.
    name: str
    #: ``gen_ai.provider.name`` for calls in this protocol, e.g. ``"openai"``.
    provider: str
    #: ``gen_ai.operation.name``, e.g. ``"chat"``.
    operation: str

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """Read the application's request body (never modifies it)."""

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """Return a new body: ``body`` plus the plan's history and system blocks.

        Nothing else may change: keys keep their order and values their types; the input
        is not mutated.
        """

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """For a streaming request that does not ask for usage, a new body that does;
        ``None`` when nothing needs to change (or the protocol always reports usage)."""

    def is_hidden_usage_event(self, event: Any) -> bool:
        """Whether a stream event only exists because :meth:`request_stream_usage` asked
        for it (and must then be hidden from the caller)."""

    def read_response(self, data: Mapping[str, Any]) -> ResponseView:
        """Read a complete (non-streamed) response body."""

    def new_accumulator(self) -> StreamAccumulator:
        """A fresh accumulator for one streamed response."""


class BaseWireProtocol:
    """A base for a :class:`WireProtocol` with the usual defaults: a ``"chat"`` operation,
    and streams that report usage on their own (memtap asks for nothing more and hides no
    event). A subclass adds ``name``, ``provider``, ``read_request``, ``inject``,
    ``read_response`` and ``new_accumulator``; a provider whose streams report usage only
    when asked overrides :meth:`request_stream_usage` and :meth:`is_hidden_usage_event`
    (as :class:`memtap.formats.openai_chat.ChatFormatProtocol` does)."""

    operation = "chat"

    def request_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Nothing to ask for: the provider's streams always report usage."""
        return None

    def is_hidden_usage_event(self, event: Any) -> bool:
        """No event is ever added by memtap."""
        return False


def default_accumulator(protocol: WireProtocol) -> StreamAccumulator:
    """The default accumulator of a stream in ``protocol``, the only one: the protocol's own
    (what ``memtap_stream_accumulator`` answers unless a plugin replaces it)."""
    return protocol.new_accumulator()


class TapPort(Protocol):
    """What a :class:`ClientAdapter` needs from the tap it installs into a client:
    :class:`memtap.request.tap.Tap` is the one memtap passes (the contract names this shape, not
    the request path's class)."""

    def begin(self, protocol: WireProtocol, *, fallback_body: Mapping[str, Any] | None = None) -> Any:
        """Start tracking one call in ``protocol`` (a :class:`memtap.request.tap.Call`)."""

    def register_client(self, client: Any) -> Callable[[], None]:
        """Register another client with the same Memory (an adapter of an object that wraps
        SDK clients); returns the function undoing it."""

    def register_derived(self, parent: Any, client: Any) -> None:
        """Register a client derived from ``parent`` (e.g. ``with_options()``)."""


@runtime_checkable
class ClientAdapter(Protocol):
    """Patches one kind of SDK client for memtap (returned by ``memtap_match_client``)."""

    #: The provider name shown in errors and listings, e.g. ``"openai"``.
    provider: str

    def install(self, client: Any, tap: TapPort) -> Callable[[], None]:
        """Patch ``client`` (the instance, never its class) so its calls go through ``tap``;
        return a function that restores every patched attribute."""


@attrs.frozen
class RawExchange:
    """One finished call, before formatting: what the capture path hands the payload hooks.

    ``request_body`` is the body as the application built it (before injection);
    ``response`` the complete response JSON, or ``None`` when ``stream_result`` holds
    what a stream delivered. ``profile`` is the call's agent profile, if one is known:
    its scaffolding is not the user's (:func:`memtap.formats.scaffolding.own_view`).
    ``request_view`` is the request as injection read it (scaffolding left out), when it
    was: formatting need not read the body again.
    """

    protocol: WireProtocol
    attribution: Attribution
    request_body: Mapping[str, Any]
    response: Mapping[str, Any] | None
    stream_result: ResponseView | None
    already_present: int
    started_at: _dt.datetime
    ended_at: _dt.datetime
    stream: bool = False
    error: str | None = None
    partial: bool = False
    id: str = ""
    profile: AgentProfile | None = attrs.field(default=None, eq=False)
    request_view: RequestView | None = attrs.field(default=None, eq=False)
