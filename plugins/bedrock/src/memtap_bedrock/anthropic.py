"""Anthropic Messages bodies on Bedrock (``bedrock.anthropic``): ``invoke_model`` and
``invoke_model_with_response_stream`` with a JSON body carrying ``anthropic_version``.

The body memtap reads is the parsed JSON plus the call's ``modelId`` (Bedrock puts the
model in the URL; the adapter strips ``modelId`` again before re-serialising). Everything
else is the Anthropic Messages format, read and written by core's
:mod:`memtap.formats.anthropic_messages` exactly as for the anthropic SDK, so a Claude turn is stored
the same through Bedrock as through Anthropic's API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memtap.sdk import AnthropicFormatProtocol, RequestView

from .converse import PROVIDER


def is_anthropic_body(body: Any) -> bool:
    """Whether a parsed ``invoke_model`` body is an Anthropic Messages request."""
    return isinstance(body, Mapping) and "anthropic_version" in body and "messages" in body


class BedrockAnthropicProtocol(AnthropicFormatProtocol):
    """Anthropic Messages bodies sent through ``invoke_model``."""

    name = "bedrock.anthropic"
    provider = PROVIDER

    def read_request(self, body: Mapping[str, Any]) -> RequestView:
        """As the Anthropic API's, the model taken from ``modelId``."""
        model = body.get("modelId")
        return super().read_request({**body, "model": model} if model else body)
