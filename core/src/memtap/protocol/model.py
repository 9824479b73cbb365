"""The canonical data model: what memtap captures, stores and recalls.

Every provider's wire format is turned into these classes by its plugin, and every storage
backend stores exactly these. They are plain attrs classes; :data:`converter` (cattrs) turns
them into JSON-ready dicts and back, so export/import and the on-disk formats share one
serialisation.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import os
from collections.abc import Callable, Iterable
from typing import Any, Literal

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

Role = Literal["system", "user", "assistant", "tool"]
ExchangeStatus = Literal["ok", "error", "partial"]

#: The entity that calls outside any :meth:`memtap.Memory.scope` are attributed to.
DEFAULT_ENTITY_ID = "default"
#: The session that calls outside any scope are attributed to (one running conversation).
DEFAULT_SESSION_ID = "default"


def utcnow() -> _dt.datetime:
    """The current time, timezone-aware (UTC)."""
    return _dt.datetime.now(_dt.timezone.utc)


def aware(at: _dt.datetime) -> _dt.datetime:
    """``at`` with a timezone: a naive time is taken as UTC."""
    if not isinstance(at, _dt.datetime):
        raise TypeError(f"a time must be a datetime, not {type(at).__name__}")
    return at if at.tzinfo is not None else at.replace(tzinfo=_dt.timezone.utc)


class _IdSource:
    """Unique ids without a syscall per id: a random per-process prefix (renewed after
    ``fork``) plus a counter. 64 random bits tell processes and hosts apart."""

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.prefix = os.urandom(8).hex()
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):016x}"


_ids = _IdSource()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ids.renew)


def new_id() -> str:
    """A new unique identifier (32 hex characters)."""
    return _ids.next()


#: Exchange metadata naming the agent profile the call was read with (memorize keeps a
#: coding agent's answers out of episodes: its narration of work, echoing its scaffolding).
AGENT_KEY = "agent"


def derived_id(*parts: str) -> str:
    """An identifier made from ``parts`` (32 hex characters, like :func:`new_id`): whatever
    is derived again from the same parts gets the same id, so storing it twice is a no-op."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def as_messages(value: Iterable[Message]) -> tuple[Message, ...]:
    """Converter: any iterable of messages as a tuple."""
    return tuple(value)


def as_tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """Converter: any iterable of tool calls as a tuple."""
    return tuple(value)


def as_strings(value: Iterable[str]) -> tuple[str, ...]:
    """Converter: any iterable of strings as a tuple."""
    return tuple(value)


@attrs.frozen
class ToolCall:
    """A tool (function) call requested by the model.

    ``arguments`` is kept as the JSON text the provider sent, never re-parsed, so a replay
    is byte-faithful.
    """

    id: str
    name: str
    arguments: str = ""
    type: str = "function"


@attrs.frozen
class Message:
    """One conversation message in provider-neutral form.

    ``content`` is the message's text (non-text parts are kept as short markers such as
    ``[image]``); ``tool_calls`` are the calls an assistant message asked for; a ``tool``
    message answers the call named by ``tool_call_id``. ``exchange_id`` and ``created_at``
    are filled in for messages read back from a store and take no part in equality.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=as_tool_calls)
    tool_call_id: str | None = None
    name: str | None = None
    exchange_id: str | None = attrs.field(default=None, eq=False)
    created_at: _dt.datetime | None = attrs.field(default=None, eq=False)

    def _head(self) -> str:
        return self.role if self.name is None else f"{self.role} ({self.name})"

    def _body(self) -> str:
        calls = "".join(f"\n  -> {c.name}({c.arguments})" for c in self.tool_calls)
        return f"{self.content}{calls}"

    def __str__(self) -> str:
        """``role: content``, then one ``-> name(arguments)`` line per tool call."""
        return f"{self._head()}: {self._body()}"

    def __rich__(self) -> Any:
        """What :meth:`__str__` says, the role in bold (the content is never read as markup)."""
        from rich.text import Text

        return Text.assemble((self._head(), "bold"), f": {self._body()}")


@attrs.frozen
class Usage:
    """Token usage as the provider reported it (``None`` where it reported nothing)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None

    @property
    def total_tokens(self) -> int | None:
        """Input plus output tokens, when both are known."""
        if self.input_tokens is None or self.output_tokens is None:
            return None
        return self.input_tokens + self.output_tokens


#: What makes an id safe to store: :mod:`memtap.redact` installs its ``redact_id`` here when
#: it is imported (``import memtap`` imports it, before any id is made), because the
#: contracts import nothing above them. Until then ids pass as they are.
_id_filter: Callable[[str], str] | None = None


def install_id_filter(redact_id: Callable[[str], str]) -> None:
    """Make every id given to :class:`Attribution` and :class:`Fact` go through
    ``redact_id`` (:func:`memtap.redact.redact_id` installs itself)."""
    global _id_filter
    _id_filter = redact_id


def _safe_id(value: str) -> str:
    """An id with any secret in it replaced by a fingerprint (the installed id filter)."""
    redact_id = _id_filter
    return redact_id(value) if redact_id is not None and isinstance(value, str) else value


def _safe_optional_id(value: str | None) -> str | None:
    return None if value is None else _safe_id(value)


@attrs.frozen
class Attribution:
    """Who a call belongs to: the entity (usually a user), the process (app or agent) and
    the session (one conversation). A secret inside an id (``user-ghp_…``) is replaced by
    its fingerprint on the way in (docs/security.md)."""

    entity_id: str = attrs.field(default=DEFAULT_ENTITY_ID, converter=_safe_id)
    session_id: str = attrs.field(default=DEFAULT_SESSION_ID, converter=_safe_id)
    process_id: str | None = attrs.field(default=None, converter=_safe_optional_id)


#: Why a fact recall considered for a call was not injected (:attr:`ExplainedFact.reason`):
#: its score was under the budget's ``min_score`` (``threshold``), the request or the
#: injected history already carried it (``duplicate``), its line did not fit the token
#: budget (``budget``), or ``k`` facts were injected already (``limit``).
LEFT_OUT_REASONS = ("threshold", "not an answer", "duplicate", "budget", "limit")


def _as_parts(value: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(value).items()}


@attrs.frozen
class ExplainedFact:
    """A fact recall considered for one call: injected (``reason`` is ``None``) or left
    out (``reason``: one of :data:`LEFT_OUT_REASONS`).

    ``score`` is the fused recall score in [0, 1]; ``parts`` what it is made of, as recall
    computed it: ``words`` (the BM25 part), ``vector`` (the embedding part, when a query
    vector was used), ``role`` (an assistant turn's discount), ``present`` (a question about
    now favouring newer facts), ``time`` (the bonus of a fact of the time the question
    names), ``recency`` (the tie-breaker) and ``moved`` (what a fact gained by taking the
    place of one ranked above it) add up to the score (capped at 1); ``bm25``, ``coverage``
    and ``cosine`` are the raw signals; ``superseded`` (1) marks an older statement a newer
    one about the same thing ranks above.
    """

    fact_id: str
    text: str
    score: float
    parts: dict[str, float] = attrs.field(factory=dict, converter=_as_parts)
    reason: str | None = None


def as_explained_facts(value: Iterable[ExplainedFact]) -> tuple[ExplainedFact, ...]:
    """Converter: any iterable of explained facts as a tuple."""
    return tuple(value)


@attrs.frozen
class InjectedBlock:
    """One thing memtap injected into a call.

    ``kind`` is ``"history"`` (the session's earlier turns, in ``turns``: messages stamped
    with the exchange they were stored with), ``"recall"`` (recalled facts: ``facts``
    injected, ``left_out`` considered but not injected) or the name (``source``) of the
    injector of another system block. ``text`` is the block's text as the injector wrote
    it (memtap escapes it and wraps it in its labelled memory element when it injects it;
    a history block's text is its turns, one ``role: content`` line each).
    """

    kind: str
    text: str = ""
    facts: tuple[ExplainedFact, ...] = attrs.field(default=(), converter=as_explained_facts)
    left_out: tuple[ExplainedFact, ...] = attrs.field(default=(), converter=as_explained_facts)
    turns: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)


def as_blocks(value: Iterable[InjectedBlock]) -> tuple[InjectedBlock, ...]:
    """Converter: any iterable of injected blocks as a tuple."""
    return tuple(value)


@attrs.frozen
class Exchange:
    """One captured LLM call: the new messages sent (injected ones excluded) and received.

    ``input`` holds only what the application itself added to the conversation in this call;
    ``system`` the application's own system/instruction text, if any (stored, never
    replayed as history); ``output`` the model's answer.
    """

    attribution: Attribution
    provider: str
    operation: str
    input: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)
    output: tuple[Message, ...] = attrs.field(default=(), converter=as_messages)
    system: str | None = None
    request_model: str | None = None
    response_model: str | None = None
    usage: Usage = attrs.field(factory=Usage)
    finish_reasons: tuple[str, ...] = attrs.field(default=(), converter=as_strings)
    stream: bool = False
    status: ExchangeStatus = "ok"
    error: str | None = None
    started_at: _dt.datetime = attrs.field(factory=utcnow)
    ended_at: _dt.datetime = attrs.field(factory=utcnow)
    metadata: dict[str, str] = attrs.field(factory=dict)
    id: str = attrs.field(factory=new_id)
    #: What memtap injected into this call (empty: nothing, or not recorded); redacted
    #: like the messages. Not part of equality (a diagnostic record, not the conversation).
    injected: tuple[InjectedBlock, ...] = attrs.field(default=(), converter=as_blocks, eq=False)

    @property
    def messages(self) -> tuple[Message, ...]:
        """Input then output messages, in conversation order."""
        return self.input + self.output


@attrs.frozen
class Fact:
    """Something memtap remembers about an entity.

    ``kind`` is ``"fact"`` for stated or extracted facts and ``"episode"`` for a user turn
    kept verbatim. ``supersedes`` names the fact this one replaced (which stays stored, with
    ``superseded_by`` set, so the history of a fact is kept).
    """

    entity_id: str = attrs.field(converter=_safe_id)
    text: str
    process_id: str | None = attrs.field(default=None, converter=_safe_optional_id)
    kind: str = "fact"
    source_exchange_id: str | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    created_at: _dt.datetime = attrs.field(factory=utcnow)
    metadata: dict[str, str] = attrs.field(factory=dict)
    id: str = attrs.field(factory=new_id)

    def __str__(self) -> str:
        """The fact's text."""
        return self.text

    def with_context_of(self, other: Fact) -> Fact:
        """This fact with ``other``'s context (``metadata["context"]``, :data:`CONTEXT_KEY`)
        in place of its own; without one when ``other`` has none."""
        metadata = {k: v for k, v in self.metadata.items() if k != CONTEXT_KEY}
        context = other.metadata.get(CONTEXT_KEY)
        if context:
            metadata[CONTEXT_KEY] = context
        return attrs.evolve(self, metadata=metadata)


#: Metadata key of a fact's context: text indexed (with a lower weight) alongside its own,
#: such as the turns around an episode.
CONTEXT_KEY = "context"


@attrs.frozen
class ScoredFact:
    """A recalled fact with its relevance score (higher is better)."""

    fact: Fact
    score: float

    @property
    def text(self) -> str:
        """The fact's text."""
        return self.fact.text


@attrs.frozen
class SessionInfo:
    """A stored session: who it belongs to, when it was active, how many exchanges it has."""

    session_id: str
    entity_id: str
    process_id: str | None
    created_at: _dt.datetime
    updated_at: _dt.datetime
    exchange_count: int = 0


@attrs.frozen
class Explanation:
    """Why the model saw what it saw in one captured call (:meth:`memtap.Memory.explain`):
    the exchange, and each block memtap injected into it, in the order they were merged
    (history first, then system blocks by slot and priority)."""

    exchange: Exchange
    blocks: tuple[InjectedBlock, ...] = attrs.field(default=(), converter=as_blocks)

    @property
    def facts(self) -> tuple[ExplainedFact, ...]:
        """Every injected fact, block after block."""
        return tuple(f for b in self.blocks for f in b.facts)

    @property
    def turns(self) -> tuple[Message, ...]:
        """Every injected history turn, oldest first."""
        return tuple(m for b in self.blocks for m in b.turns)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (what ``memtap explain --json`` prints): ``exchange`` (the captured
        call, as in an export, without its blocks) and ``blocks``, each with ``kind``,
        ``text``, ``facts`` and ``left_out`` (``fact_id``, ``text``, ``score``, ``parts``,
        ``reason``) and ``turns`` (messages with their ``exchange_id``)."""
        return explanation_to_dict(self)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(_dt.datetime, lambda d: d.isoformat())
    conv.register_structure_hook(_dt.datetime, lambda v, _: _dt.datetime.fromisoformat(v))
    # Metadata on read-back messages is a store detail, not part of the canonical record.
    conv.register_unstructure_hook(
        Message,
        make_dict_unstructure_fn(
            Message, conv, exchange_id=override(omit=True), created_at=override(omit=True)
        ),
    )
    # Injected blocks have their own form (their turns name the exchange they came from).
    conv.register_unstructure_hook(InjectedBlock, lambda b: injected_converter.unstructure(b, InjectedBlock))
    conv.register_structure_hook(InjectedBlock, lambda v, _: injected_converter.structure(v, InjectedBlock))
    # An exchange without injected blocks (most exports) keeps its former shape.
    conv.register_unstructure_hook(
        Exchange, make_dict_unstructure_fn(Exchange, conv, injected=override(omit_if_default=True))
    )
    return conv


def _make_injected_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(_dt.datetime, lambda d: d.isoformat())
    conv.register_structure_hook(_dt.datetime, lambda v, _: _dt.datetime.fromisoformat(v))
    # An injected turn names the exchange it was stored with (its time is that exchange's).
    conv.register_unstructure_hook(
        Message,
        make_dict_unstructure_fn(Message, conv, created_at=override(omit=True), _cattrs_omit_if_default=True),
    )
    conv.register_unstructure_hook(
        ExplainedFact, make_dict_unstructure_fn(ExplainedFact, conv, _cattrs_omit_if_default=False)
    )
    conv.register_unstructure_hook(
        InjectedBlock, make_dict_unstructure_fn(InjectedBlock, conv, _cattrs_omit_if_default=False)
    )
    return conv


#: The one cattrs converter for every model class (JSON-ready dicts both ways).
converter: cattrs.Converter = _make_converter()


#: The converter of injected blocks (their turns keep the exchange id they came from).
injected_converter: cattrs.Converter = _make_injected_converter()


def injected_to_json(blocks: Iterable[InjectedBlock]) -> list[Any]:
    """Injected blocks as JSON-ready data (what the SQL stores keep in ``exchanges.injected``)."""
    return [injected_converter.unstructure(b, InjectedBlock) for b in blocks]


def injected_from_json(data: Any) -> tuple[InjectedBlock, ...]:
    """Injected blocks back from :func:`injected_to_json`'s data (``None``: none)."""
    if not data:
        return ()
    return tuple(injected_converter.structure(b, InjectedBlock) for b in data)


def explanation_to_dict(explanation: Explanation) -> dict[str, Any]:
    """The JSON form of an :class:`Explanation` (see :meth:`Explanation.to_dict`)."""
    exchange = converter.unstructure(explanation.exchange, Exchange)
    exchange.pop("injected", None)
    return {"exchange": exchange, "blocks": injected_to_json(explanation.blocks)}


def to_dict(obj: Any) -> Any:
    """Unstructure a model object into JSON-ready data."""
    return converter.unstructure(obj)


def from_dict(data: Any, cls: type[Any]) -> Any:
    """Structure JSON-ready data back into a model object of ``cls``."""
    return converter.structure(data, cls)
