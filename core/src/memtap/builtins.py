"""Core's own default behaviour, registered as plugins through the same hooks as any other.

- ``payload``: formats a raw call into an :class:`~memtap.model.Exchange` through its
  wire protocol (last resort, so a provider plugin may format its own calls).
- ``redact``: a wrapper around every formatter that removes secrets from what is stored.
- ``accumulator``: a stream's accumulator is its protocol's, unless a plugin says otherwise.
- ``memory-store``: answers ``memory://`` with the in-process reference store.
- ``litellm-embedder``: answers the embedder spec ``litellm:<model>`` (remote embeddings).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

import attrs

from .hookspecs import hookimpl
from .model import Exchange, ExchangeStatus, Message, new_id
from .scaffolding import own_view
from .storage import InMemoryStore, Store
from .wire import RawExchange, ResponseView, StreamAccumulator, WireProtocol


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
        )


#: Patterns of credentials that must never be stored (provider keys, cloud keys, tokens).
SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bsk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bxai-[A-Za-z0-9]{20,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"),
    re.compile(r"\b(?:xox[abpors]-)[A-Za-z0-9\-]{10,}"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{16,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
)
REDACTED = "[REDACTED]"


#: Literal pieces of which every :data:`SECRET_PATTERNS` match contains one (``bearer`` is
#: checked case-insensitively).
_SECRET_MARKERS = (
    "sk-", "xai-", "AIza", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "github_pat_", "xox", "-----BEGIN",
)  # fmt: skip


def might_contain_secret(text: str) -> bool:
    """Whether ``text`` could contain a credential matching :data:`SECRET_PATTERNS`: a
    necessary condition, about 1 µs per marker per KB, where the patterns themselves cost
    ~50 µs per KB each (a leading ``\\b`` defeats the regex engine's literal search)."""
    for marker in _SECRET_MARKERS:
        if marker in text:
            return True
    return "bearer" in text.lower()


def redact_text(text: str) -> str:
    """``text`` with every credential-looking substring replaced by ``[REDACTED]``."""
    if not text or not might_contain_secret(text):
        return text
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


def _redact_message(m: Message) -> Message:
    content = redact_text(m.content)
    calls = tuple(attrs.evolve(c, arguments=redact_text(c.arguments)) for c in m.tool_calls)
    if content is m.content and all(a is b for a, b in zip(calls, m.tool_calls)):
        return m
    return attrs.evolve(m, content=content, tool_calls=calls)


def redact_exchange(exchange: Exchange) -> Exchange:
    """The exchange with secrets removed from its messages, system text and metadata."""
    return attrs.evolve(
        exchange,
        input=tuple(_redact_message(m) for m in exchange.input),
        output=tuple(_redact_message(m) for m in exchange.output),
        system=redact_text(exchange.system) if exchange.system else exchange.system,
        error=redact_text(exchange.error) if exchange.error else exchange.error,
        metadata={k: redact_text(v) for k, v in exchange.metadata.items()},
    )


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
