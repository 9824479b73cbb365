"""Core's own default behaviour, registered as plugins through the same hooks as any other.

- ``payload``: formats a raw call into an :class:`~memtap.model.Exchange` through its
  wire protocol (last resort, so a provider plugin may format its own calls).
- ``redact``: a wrapper around every formatter that removes secrets from what is stored
  (the detectors live in :mod:`memtap.redact`).
- ``accumulator``: a stream's accumulator is its protocol's, unless a plugin says otherwise.
- ``memory-store``: answers ``memory://`` with the in-process reference store.
- ``litellm-embedder``: answers the embedder spec ``litellm:<model>`` (remote embeddings).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import attrs

from .hookspecs import hookimpl
from .model import Exchange, ExchangeStatus, Fact, Message, new_id
from .redact import REDACTED, redact_text
from .scaffolding import own_view
from .storage import InMemoryStore, Store
from .wire import RawExchange, ResponseView, StreamAccumulator, WireProtocol

__all__ = [
    "AGENT_KEY",
    "REDACTED",
    "AccumulatorPlugin",
    "MemoryStorePlugin",
    "PayloadPlugin",
    "RedactPlugin",
    "builtin_plugins",
    "redact_exchange",
    "redact_fact",
    "redact_text",
]


#: Exchange metadata naming the agent profile the call was read with (memorize keeps a
#: coding agent's answers out of episodes: its narration of work, echoing its scaffolding).
AGENT_KEY = "agent"


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


def _redact_message(m: Message) -> Message:
    content = redact_text(m.content)
    calls = tuple(attrs.evolve(c, arguments=redact_text(c.arguments)) for c in m.tool_calls)
    if content is m.content and all(a is b for a, b in zip(calls, m.tool_calls)):
        return m
    return attrs.evolve(m, content=content, tool_calls=calls)


def _redact_metadata(metadata: dict[str, str]) -> dict[str, str]:
    redacted = {k: redact_text(v) for k, v in metadata.items()}
    return metadata if all(redacted[k] is v for k, v in metadata.items()) else redacted


def redact_exchange(exchange: Exchange) -> Exchange:
    """The exchange with secrets removed from its messages (text and tool-call arguments,
    which are JSON text: the redaction is escape-aware), system text, error and metadata.
    The same object when there was nothing to remove."""
    inputs = tuple(_redact_message(m) for m in exchange.input)
    outputs = tuple(_redact_message(m) for m in exchange.output)
    system = redact_text(exchange.system) if exchange.system else exchange.system
    error = redact_text(exchange.error) if exchange.error else exchange.error
    metadata = _redact_metadata(exchange.metadata)
    if (
        system is exchange.system
        and error is exchange.error
        and metadata is exchange.metadata
        and all(a is b for a, b in zip(inputs, exchange.input))
        and all(a is b for a, b in zip(outputs, exchange.output))
    ):
        return exchange
    return attrs.evolve(exchange, input=inputs, output=outputs, system=system, error=error, metadata=metadata)


def redact_fact(fact: Fact) -> Fact:
    """The fact with secrets removed from its text and metadata (the same object when
    there were none)."""
    text = redact_text(fact.text)
    metadata = _redact_metadata(fact.metadata)
    if text is fact.text and metadata is fact.metadata:
        return fact
    return attrs.evolve(fact, text=text, metadata=metadata)


class RedactPlugin:
    """Wraps every exchange formatter and removes secrets from the result."""

    @hookimpl(wrapper=True)
    def memtap_format_exchange(self, raw: RawExchange) -> Generator[None, Any, Exchange | None]:
        """Redact whatever the formatters produced."""
        exchange: Exchange | None = yield
        return None if exchange is None else redact_exchange(exchange)


class AccumulatorPlugin:
    """Default ``memtap_stream_accumulator``: the protocol's own."""

    @hookimpl(trylast=True)
    def memtap_stream_accumulator(self, protocol: WireProtocol) -> StreamAccumulator:
        """Return ``protocol.new_accumulator()``."""
        return protocol.new_accumulator()


class MemoryStorePlugin:
    """Answers ``memory://`` store URLs with :class:`~memtap.storage.InMemoryStore`."""

    @hookimpl
    def memtap_open_store(self, url: str) -> Store | None:
        """Open an in-process store for ``memory://`` URLs."""
        return InMemoryStore(url) if url.startswith("memory://") else None

    @hookimpl
    def memtap_store_schemes(self) -> list[str]:
        """``memory``."""
        return ["memory"]


def builtin_plugins() -> dict[str, object]:
    """Core's built-in plugins by name (each Memory registers fresh instances)."""
    from .embedding import LiteLLMEmbedderPlugin

    return {
        "payload": PayloadPlugin(),
        "redact": RedactPlugin(),
        "accumulator": AccumulatorPlugin(),
        "memory-store": MemoryStorePlugin(),
        "litellm-embedder": LiteLLMEmbedderPlugin(),
    }
