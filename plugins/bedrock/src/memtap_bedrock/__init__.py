"""memtap provider plugin for AWS Bedrock through boto3 ``bedrock-runtime`` clients:
``converse``, ``converse_stream``, and ``invoke_model`` /
``invoke_model_with_response_stream`` with Anthropic Messages bodies (entry point
``bedrock`` in group ``memtap``)."""

from __future__ import annotations

from typing import Any

from memtap import hookimpl
from memtap.sdk import WireProtocol

from .adapter import ANTHROPIC, CONVERSE, BedrockRuntimeAdapter, is_bedrock_runtime_client
from .anthropic import BedrockAnthropicProtocol
from .converse import ConverseProtocol

__all__ = ["BedrockAnthropicProtocol", "BedrockRuntimeAdapter", "ConverseProtocol"]


@hookimpl
def memtap_match_client(client: Any) -> BedrockRuntimeAdapter | None:
    """Recognise a boto3/botocore ``bedrock-runtime`` client (without importing boto3)."""
    return BedrockRuntimeAdapter() if is_bedrock_runtime_client(client) else None


@hookimpl
def memtap_wire_protocols() -> list[WireProtocol]:
    """Converse and Anthropic-on-Bedrock."""
    return [CONVERSE, ANTHROPIC]
