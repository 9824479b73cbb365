"""The ``litellm.chat`` wire protocol: litellm's OpenAI-shaped ``completion`` arguments and
responses.

litellm takes keyword arguments, not a JSON body, so the "body" this protocol reads and
edits is the call's keyword arguments without transport settings and credentials
(:func:`request_body`). Messages may be plain dicts or litellm/pydantic message objects (an
app often appends ``response.choices[0].message`` as it is); they are read through
``model_dump`` and never modified. The same code reads the OpenAI-shaped JSON that litellm's
``openai/`` provider puts on the wire.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from memtap.sdk import (
    ChatCodec,
    ChatFormatProtocol,
    InjectionPlan,
    SystemBlock,
    as_mapping,
    layout_messages,
    marks,
    render_blocks,
)

__all__ = ["LiteLLMChatProtocol", "as_mapping", "is_transport_key", "request_body", "uses_prompt_cache"]

#: Keyword arguments that configure transport or carry credentials: never part of the body
#: memtap records (they are passed to litellm untouched).
TRANSPORT_KEYS = frozenset(
    {
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "organization",
        "headers",
        "extra_headers",
        "timeout",
        "client",
        "shared_session",
        "model_list",
        "litellm_logging_obj",
        "litellm_call_id",
        "litellm_trace_id",
        "mock_response",
        "deployment_id",
    }
)
_SECRET_MARKERS = ("key", "secret", "password", "credential", "token")


def is_transport_key(name: str) -> bool:
    """Whether keyword ``name`` is a transport setting or may carry a credential."""
    if name in TRANSPORT_KEYS or name.startswith("aws_") or name.startswith("vertex_"):
        return True
    if name.endswith("_tokens") or name == "max_tokens":
        return False
    return any(marker in name for marker in _SECRET_MARKERS)


def request_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a ``completion`` call's keyword arguments memtap reads and edits."""
    return {k: v for k, v in kwargs.items() if not is_transport_key(k)}


class LiteLLMCodec(ChatCodec):
    """The chat format, with the tail as a *user* message (see
    :meth:`LiteLLMChatProtocol.inject`)."""

    def tail_message(self, blocks: Sequence[SystemBlock]) -> list[dict[str, Any]]:
        """Blocks as one user message (none without blocks)."""
        return [{"role": "user", "content": render_blocks(blocks)}] if blocks else []


CODEC = LiteLLMCodec()


def uses_prompt_cache(body: Mapping[str, Any]) -> bool:
    """Whether a ``completion`` call uses prompt caching: ``cache_control`` on a message or
    one of its content parts or on a tool, or a ``prompt_cache_key``."""
    if "prompt_cache_key" in body or "prompt_cache_retention" in body:
        return True
    return marks("cache_control", body.get("messages"), body.get("tools"))


class LiteLLMChatProtocol(ChatFormatProtocol):
    """litellm ``completion``/``acompletion``: OpenAI-shaped messages, any provider behind.

    ``provider`` is litellm's ``custom_llm_provider`` for the call (see :meth:`for_provider`);
    the protocol listed by the plugin says ``"litellm"``.
    """

    name = "litellm.chat"
    operation = "chat"

    def __init__(self, provider: str = "litellm") -> None:
        self.provider = provider

    def for_provider(self, provider: str | None) -> LiteLLMChatProtocol:
        """The same protocol reporting ``provider`` as ``gen_ai.provider.name``."""
        return _for_provider(provider or "litellm")

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> dict[str, Any]:
        """The app's leading system messages (a known agent's anchored blocks inside),
        ``session_init`` blocks, the history, ``per_turn`` blocks, then the rest of the
        app's messages (objects kept as they are). With prompt caching in use
        (:func:`uses_prompt_cache`), per-turn blocks are one more *user* message at the end
        instead: litellm moves system messages into an Anthropic request's ``system`` (where
        text that changes every turn would break the cached prefix) but merges a trailing
        user message into the latest user turn, after its cache breakpoint."""
        out = dict(body)
        out["messages"] = layout_messages(
            list(body.get("messages") or ()), plan, CODEC, cached=uses_prompt_cache(body)
        )
        return out


@functools.lru_cache(maxsize=256)
def _for_provider(provider: str) -> LiteLLMChatProtocol:
    return LiteLLMChatProtocol(provider)
