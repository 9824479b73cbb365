"""Capture's default formatting plugins: a finished call becomes an
:class:`~memtap.protocol.model.Exchange` through its wire protocol (``payload``), and
secrets are removed from whatever any formatter made (``redact``; the detectors live in
:mod:`memtap.redact`)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from memtap.formats.scaffolding import own_view
from memtap.protocol.markers import hookimpl
from memtap.protocol.model import AGENT_KEY, Exchange, ExchangeStatus, new_id
from memtap.protocol.wire import RawExchange, ResponseView
from memtap.redact import redact_exchange

__all__ = ["PayloadPlugin", "RedactPlugin"]


class PayloadPlugin:
    """Default ``memtap_format_exchange``: read request and response via the protocol
    (last resort, so that a provider plugin may format its own calls)."""

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
