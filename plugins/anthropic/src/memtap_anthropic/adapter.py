"""Registering anthropic SDK clients (``Anthropic``, ``AsyncAnthropic`` and subclasses)."""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

from memtap.sdk import Call, StainlessInstaller, Tap, Target, WireProtocol, tracked

from .messages import AnthropicMessagesProtocol

log = logging.getLogger("memtap.anthropic")

MESSAGES = AnthropicMessagesProtocol()

#: The attribute, name-mangled, where the SDK's stream managers keep their deferred request.
_DEFERRED_SUFFIX = "__api_request"


def wrap_stream_helper(
    installer: StainlessInstaller,
    client: Any,
    tap: Tap,
    protocol: WireProtocol,
    original: Callable[..., Any],
) -> Callable[..., Any]:
    """Wrap ``messages.stream(...)``: it builds its own request (it does not call
    ``create``) and sends it only when its manager is entered, so the manager's deferred
    request is replaced by one that memtap tracks. The raw event stream under the
    ``MessageStream`` is observed, so the call is captured exactly once, whether the app
    reads ``text_stream``, iterates events, calls ``get_final_message()`` or leaves early."""

    @functools.wraps(original)
    def stream(*args: Any, **kwargs: Any) -> Any:
        manager = original(*args, **kwargs)
        try:
            _defer(installer, client, tap, protocol, manager, kwargs, lambda: original(*args, **kwargs))
        except Exception:
            log.exception("memtap could not track a %s stream helper; it proceeds untracked", protocol.name)
        return manager

    return stream


def _defer(
    installer: StainlessInstaller,
    client: Any,
    tap: Tap,
    protocol: WireProtocol,
    manager: Any,
    kwargs: dict[str, Any],
    remake: Callable[[], Any],
) -> None:
    """Replace ``manager``'s deferred request with its tracked form (the call's body falls
    back to the helper's ``kwargs``); ``remake()`` makes a new manager of the same request
    (whose pending coroutine a re-send awaits: an async manager's request is a coroutine,
    awaitable once)."""
    name = next((k for k in vars(manager) if k.endswith(_DEFERRED_SUFFIX)), None)
    if name is None:
        log.warning("memtap: %s has no deferred request; stream left untracked", type(manager).__name__)
        return
    begin = installer.begin(client, tap, protocol)

    def begin_helper(args: tuple[Any, ...], _request_kwargs: dict[str, Any]) -> Call | None:
        return begin(args, kwargs)  # the body falls back to the helper's arguments

    request = getattr(manager, name)
    if inspect.isawaitable(request):
        pending = [request]

        async def send() -> Any:
            return await (pending.pop() if pending else getattr(remake(), name))

        setattr(manager, name, tracked(send, begin_helper, installer.outcome, what=protocol.name)())
    else:
        setattr(manager, name, tracked(request, begin_helper, installer.outcome, what=protocol.name))


#: What memtap patches, on ``messages`` and ``beta.messages``.
TARGETS = tuple(
    target
    for path in (("messages",), ("beta", "messages"))
    for target in (
        Target(path, "create", MESSAGES),
        Target(path, "parse", MESSAGES),
        Target(path, "stream", MESSAGES, wrap=wrap_stream_helper),
    )
)


def is_anthropic_client(client: Any) -> bool:
    """Whether ``client`` is an anthropic SDK client (checked without importing anthropic)."""
    anthropic = sys.modules.get("anthropic")
    if anthropic is None or isinstance(client, type):
        return False
    bases = tuple(
        cls
        for cls in (getattr(anthropic, "Anthropic", None), getattr(anthropic, "AsyncAnthropic", None))
        if cls
    )
    return bool(bases) and isinstance(client, bases)


class AnthropicAdapter:
    """Patches an anthropic client instance through its Stainless structure."""

    provider = "anthropic"

    def __init__(self) -> None:
        self._installer = StainlessInstaller(TARGETS)

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Patch ``client``; return the restore function."""
        return self._installer.install(client, tap)
