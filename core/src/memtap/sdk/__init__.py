"""The plugin SDK: what a provider, hook or embedder plugin imports from core.

This package is the stable surface for plugin authors. Plugins (``plugins/*``), contrib
packages and third-party plugins import from core only ``memtap`` (the user-facing names:
``Memory``, ``hookimpl``, the model types, the errors) and ``memtap.sdk``, split by audience:

- ``memtap.sdk`` (this module): what provider, hook and embedder plugins use;
- :mod:`memtap.sdk.storage`: what storage backends use (the ``Store`` protocol, the change
  feed, the SQL row helpers, the store's files);
- :mod:`memtap.sdk.server`: what servers on top of memtap use (proxy, ui, mcp: tokens, hosts,
  the store a server serves).

Their tests may also use ``memtap.testing``. Everything else in core is internal and may
move between releases; the names in each module's ``__all__`` follow semantic versioning:
removing or changing one is a major release, adding one is a minor release.
``tests/core/test_plugin_imports.py`` holds every plugin and contrib package to this, and
``tests/docs/test_sdk_tables.py`` holds ``docs/plugin-authoring.md``'s tables to the
``__all__`` lists.

The names that moved to :mod:`memtap.sdk.storage` and :mod:`memtap.sdk.server` still import
from ``memtap.sdk`` for one release, with a :class:`DeprecationWarning` naming their new home
(they are not in ``__all__`` here).

Names come in groups (see ``docs/plugin-authoring.md`` for when to use each):

- **hook marker**: :data:`hookimpl`.
- **model**: the records memtap stores and hands to hooks (:class:`Message`, :class:`Exchange`,
  :class:`Fact`, ...), :data:`Role`, :data:`ExchangeStatus`, :func:`to_dict` and
  :func:`utcnow`.
- **wire contracts**: what the hooks take and return: what a wire protocol implements and
  receives (:class:`WireProtocol`, :class:`RequestView`, :class:`ResponseView`,
  :class:`InjectionPlan`, :class:`SystemBlock`, :class:`StreamAccumulator`), a client adapter
  (:class:`ClientAdapter`, :class:`TapPort`), an injector (:class:`InjectionRequest`,
  :data:`Injection`, :class:`HistoryInjection`), a formatter (:class:`RawExchange`), an
  embedder (:class:`Embedder`); :data:`VALIDATION_STATUSES` (the HTTP statuses of a
  validation rejection).
- **the request path**: :class:`Tap` (what an adapter reports calls to), :class:`Call` and
  :func:`active_call`.
- **the patch kit**: :class:`Patches` (attributes set on a client, undone exactly),
  :func:`tracked` (an SDK method as a tracked call, in the method's own sync/async/stream
  form; :data:`Begin`, :data:`Attempt`, :data:`Outcome` are what it is given;
  :func:`tracked_kwargs` for a method whose keyword arguments are the request body), and
  :class:`StreamTap` (observing a streamed answer: :meth:`StreamTap.iterate`,
  :meth:`StreamTap.aiterate`, or :func:`retype` / :func:`subclass_of` for an SDK's own
  stream class; :data:`JsonFn`, :data:`EventFilter`); :class:`StainlessInstaller` /
  :class:`Target` do all of it for Stainless-generated SDKs (OpenAI, Anthropic).
- **codecs**: the OpenAI chat format (:class:`ChatFormatProtocol`, :data:`CHAT_CODEC`,
  ``*_chat_*`` readers and writers), the Anthropic Messages format
  (:class:`AnthropicFormatProtocol`, ``*_anthropic_*``), and :class:`MessageCodec` /
  :func:`layout_messages` to lay out a message list for a format of your own.
- **placement**: rendering blocks (:func:`render_blocks`) and putting them into requests
  (:func:`arrange`, :func:`inject_blocks`, :func:`with_system`, ...); :func:`content_text`.
- **agent scaffolding**: :class:`AgentProfile`, :class:`Segment`, :func:`detect_profile`,
  :class:`TaggedScaffolding`, :func:`own_view`, :func:`is_side_call`, :func:`looks_like_agent`.
- **redaction, background work**: :func:`redact_text`, :func:`redact_url`,
  :func:`lower_priority`, :func:`wait_for_quiet`, :func:`native_work` (and
  :class:`InterpreterExiting`: a background thread's model run that the interpreter's exit
  waits for, since one ended mid-run aborts the process).
- **files published whole**: :func:`publish_atomically` (a file that processes running at
  once may write, and a killed one must not leave half-written: a model derived once per
  machine, say) and :func:`remove_stale_work` (what a killed writer left, older than
  :data:`STALE_WORK_SECONDS`).
- **errors**: :class:`MemtapError`, :class:`StoreError`, :class:`UnsupportedClientError`.

A few core names would be ambiguous side by side (the chat and the Anthropic format both
have a ``read_message``); here they carry a prefix, and a plugin that wants the short name
imports it ``as`` that name.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from memtap.adapters.kwargs import tracked_kwargs
from memtap.adapters.patches import Patches
from memtap.adapters.stainless import StainlessInstaller, Target
from memtap.adapters.streamtap import EventFilter, JsonFn, StreamTap, early_end_subclass, retype, subclass_of
from memtap.adapters.tracked import Attempt, Begin, Outcome, tracked
from memtap.capture.wholefile import STALE_WORK_SECONDS, publish_atomically, remove_stale_work
from memtap.errors import MemtapError, StoreError, UnsupportedClientError
from memtap.formats.anthropic_messages import (
    THINKING_TYPES,
    AnthropicFormatProtocol,
    MessagesStreamAccumulator,
    inject_messages,
    read_messages_request,
    read_messages_response,
)
from memtap.formats.anthropic_messages import is_tail_turn as is_anthropic_tail_turn
from memtap.formats.anthropic_messages import read_message as read_anthropic_message
from memtap.formats.anthropic_messages import read_usage as read_anthropic_usage
from memtap.formats.anthropic_messages import tool_arguments as anthropic_tool_arguments
from memtap.formats.anthropic_messages import uses_prompt_cache as anthropic_uses_prompt_cache
from memtap.formats.anthropic_messages import write_history as write_anthropic_history
from memtap.formats.blocks import render_blocks
from memtap.formats.content import content_text
from memtap.formats.layout import MessageCodec, layout_messages, leading_count
from memtap.formats.openai_chat import (
    CHAT_CODEC,
    SYSTEM_ROLES,
    ChatCodec,
    ChatFormatProtocol,
    ChatStreamAccumulator,
    as_mapping,
    read_chat_request,
    read_chat_response,
)
from memtap.formats.openai_chat import is_hidden_usage_event as is_hidden_chat_usage_event
from memtap.formats.openai_chat import read_message as read_chat_message
from memtap.formats.openai_chat import read_usage as read_chat_usage
from memtap.formats.openai_chat import request_stream_usage as chat_request_stream_usage
from memtap.formats.openai_chat import write_message as write_chat_message
from memtap.formats.pairing import trim_unpaired
from memtap.formats.placement import (
    arrange,
    content_texts,
    inject_blocks,
    last_index,
    marks,
    regroup,
    with_system,
    with_tail,
    with_texts,
)
from memtap.formats.scaffolding import TaggedScaffolding, is_side_call, looks_like_agent, own_view
from memtap.hookspecs import hookimpl
from memtap.protocol.anchors import AgentProfile, Segment, detect_profile
from memtap.protocol.embedder import Embedder
from memtap.protocol.model import (
    Attribution,
    Exchange,
    ExchangeStatus,
    ExplainedFact,
    Explanation,
    Fact,
    InjectedBlock,
    Message,
    Role,
    ScoredFact,
    SessionInfo,
    ToolCall,
    Usage,
    to_dict,
    utcnow,
)
from memtap.protocol.wire import (
    BaseWireProtocol,
    ClientAdapter,
    HistoryInjection,
    Injection,
    InjectionPlan,
    InjectionRequest,
    RawExchange,
    RequestView,
    ResponseView,
    StreamAccumulator,
    SystemBlock,
    TapPort,
    WireProtocol,
)
from memtap.redact import redact_text, redact_url
from memtap.request.rejection import VALIDATION_STATUSES
from memtap.request.tap import Call, Tap, active_call
from memtap.sdk import server as _server
from memtap.sdk import storage as _storage
from memtap.workers.background import lower_priority, wait_for_quiet
from memtap.workers.native import InterpreterExiting, native_work

#: Where each name that left this module lives now (importable from here, with a
#: DeprecationWarning, until the next minor release).
_MOVED: dict[str, str] = {
    **dict.fromkeys(_storage.__all__, "memtap.sdk.storage"),
    **dict.fromkeys(_server.__all__, "memtap.sdk.server"),
}


def __getattr__(name: str) -> Any:
    """A name that moved to :mod:`memtap.sdk.storage` or :mod:`memtap.sdk.server`, with a
    DeprecationWarning naming its new home."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"memtap.sdk.{name} moved to {home}: import it from there "
        "(the old name goes in the next minor release)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


__all__ = [  # noqa: RUF022 (grouped as in the docstring, not one alphabetical list)
    # agent scaffolding
    "AgentProfile",
    "Segment",
    "TaggedScaffolding",
    "is_side_call",
    "looks_like_agent",
    "detect_profile",
    "own_view",
    # codecs: the Anthropic Messages format
    "THINKING_TYPES",
    "AnthropicFormatProtocol",
    "MessagesStreamAccumulator",
    "anthropic_tool_arguments",
    "anthropic_uses_prompt_cache",
    "inject_messages",
    "is_anthropic_tail_turn",
    "read_anthropic_message",
    "read_anthropic_usage",
    "read_messages_request",
    "read_messages_response",
    "write_anthropic_history",
    # codecs: the OpenAI chat format
    "CHAT_CODEC",
    "SYSTEM_ROLES",
    "ChatCodec",
    "ChatFormatProtocol",
    "ChatStreamAccumulator",
    "as_mapping",
    "chat_request_stream_usage",
    "is_hidden_chat_usage_event",
    "read_chat_message",
    "read_chat_request",
    "read_chat_response",
    "read_chat_usage",
    "write_chat_message",
    # codecs: laying out a message list
    "MessageCodec",
    "layout_messages",
    "leading_count",
    "trim_unpaired",
    # errors
    "MemtapError",
    "StoreError",
    "UnsupportedClientError",
    # hook marker
    "hookimpl",
    # model
    "Attribution",
    "Exchange",
    "ExchangeStatus",
    "ExplainedFact",
    "Explanation",
    "Fact",
    "InjectedBlock",
    "Message",
    "Role",
    "ScoredFact",
    "SessionInfo",
    "ToolCall",
    "Usage",
    "to_dict",
    "utcnow",
    # the patch kit
    "Attempt",
    "Begin",
    "EventFilter",
    "JsonFn",
    "Outcome",
    "Patches",
    "StainlessInstaller",
    "StreamTap",
    "Target",
    "retype",
    "subclass_of",
    "early_end_subclass",
    "tracked",
    "tracked_kwargs",
    # placement
    "arrange",
    "content_text",
    "content_texts",
    "inject_blocks",
    "last_index",
    "marks",
    "regroup",
    "render_blocks",
    "with_system",
    "with_tail",
    "with_texts",
    # redaction, background work
    "lower_priority",
    "native_work",
    "InterpreterExiting",
    "redact_text",
    "redact_url",
    "wait_for_quiet",
    # files published whole
    "publish_atomically",
    "remove_stale_work",
    "STALE_WORK_SECONDS",
    # the request path
    "Call",
    "Tap",
    "active_call",
    # wire contracts: what the hooks take and return
    "VALIDATION_STATUSES",
    "ClientAdapter",
    "Embedder",
    "HistoryInjection",
    "Injection",
    "InjectionPlan",
    "InjectionRequest",
    "RawExchange",
    "RequestView",
    "ResponseView",
    "StreamAccumulator",
    "SystemBlock",
    "TapPort",
    "WireProtocol",
    "BaseWireProtocol",
]
