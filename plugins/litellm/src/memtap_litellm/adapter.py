"""Registering the ``litellm`` module and ``litellm.Router`` instances.

``mem.register(litellm)`` replaces the module attributes ``litellm.completion`` and
``litellm.acompletion`` with dispatchers (the originals come back on unregister). A
``Router`` calls those module functions for every deployment it tries, so
``mem.register(router)`` wraps the instance's ``completion``/``acompletion`` to mark the
calls made on its behalf, and the same dispatchers tap them: each attempt is one call,
attributed to the provider litellm chose for it. A call made inside a tapped call (litellm
calling itself) is passed through, so nothing is captured twice.

litellm is never imported here: it is found in ``sys.modules`` when the app has imported it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from memtap.sdk import Call, Patches, Tap, tracked

from .protocol import LiteLLMChatProtocol, request_body
from .streams import tap_stream

log = logging.getLogger("memtap.litellm")

#: The protocol every litellm call uses (``provider`` is set per call).
CHAT = LiteLLMChatProtocol()
#: The module functions memtap taps.
MODULE_FUNCTIONS = ("completion", "acompletion")
#: The Router methods whose calls are tapped (through the module functions they call).
ROUTER_METHODS = ("completion", "acompletion")

#: The tap of the registered Router whose method is running in this context.
_router_tap: contextvars.ContextVar[Tap | None] = contextvars.ContextVar(
    "memtap_litellm_router", default=None
)
#: Set while a tapped litellm call runs: litellm calling itself is not tapped again.
_in_call: contextvars.ContextVar[bool] = contextvars.ContextVar("memtap_litellm_in_call", default=False)


def litellm_module() -> Any:
    """The imported ``litellm`` module, or ``None`` (never imports it)."""
    return sys.modules.get("litellm")


def is_litellm_module(client: Any) -> bool:
    """Whether ``client`` is the ``litellm`` module itself."""
    module = litellm_module()
    return module is not None and client is module


def is_router(client: Any) -> bool:
    """Whether ``client`` is a ``litellm.Router`` (checked without touching litellm)."""
    if litellm_module() is None or isinstance(client, type):
        return False
    return any(c.__name__ == "Router" and c.__module__.startswith("litellm.") for c in type(client).__mro__)


def to_json(obj: Any) -> Mapping[str, Any] | None:
    """The OpenAI-shaped JSON of a litellm response or chunk."""
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = dump()
    return data if isinstance(data, Mapping) else None


def _is_stream(result: Any) -> bool:
    cls = type(result)
    return hasattr(cls, "__next__") or hasattr(cls, "__anext__")


def _provider_of(result: Any) -> str | None:
    provider = getattr(result, "custom_llm_provider", None)
    if isinstance(provider, str):
        return provider
    hidden = getattr(result, "_hidden_params", None)
    if isinstance(hidden, Mapping):
        value = hidden.get("custom_llm_provider")
        if isinstance(value, str):
            return value
    return None


def _as_kwargs(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Positional arguments (``completion("gpt-4o", messages)``) as keywords."""
    if not args:
        return kwargs
    bound = inspect.signature(original).bind_partial(*args, **kwargs).arguments
    out: dict[str, Any] = {}
    for name, param in inspect.signature(original).parameters.items():
        if name not in bound:
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            out.update(bound[name])
        elif param.kind is not inspect.Parameter.VAR_POSITIONAL:
            out[name] = bound[name]
    return out


class _ModuleTaps:
    """The dispatchers installed on one litellm module and who uses them."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.patches = Patches()
        self.module_tap: Tap | None = None
        self.users = 0

    def tap_for_call(self) -> Tap | None:
        if _in_call.get():
            return None
        return _router_tap.get() or self.module_tap

    def install(self) -> None:
        with self.patches.all_or_nothing():
            for name in MODULE_FUNCTIONS:
                self.patches.wrap(self.module, name, self._dispatcher)

    def uninstall(self) -> None:
        self.patches.restore()

    def _dispatcher(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` (``completion`` or ``acompletion``) tracked for whichever tap is
        current; litellm calling itself inside a tracked call is passed through."""

        def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call | None:
            tap = self.tap_for_call()
            if tap is None:
                return None
            call_kwargs = _as_kwargs(original, args, kwargs)
            call = tap.begin(CHAT, fallback_body=request_body(call_kwargs))
            call.adapter_state = call_kwargs
            return call

        def attempt(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            token = _in_call.set(True)
            try:
                return original(**_prepared(call))
            finally:
                _in_call.reset(token)

        async def attempt_async(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            token = _in_call.set(True)
            try:
                return await original(**_prepared(call))
            finally:
                _in_call.reset(token)

        is_async = inspect.iscoroutinefunction(inspect.unwrap(original))
        dispatcher = tracked(
            original, begin, _outcome, attempt=attempt_async if is_async else attempt, what="litellm"
        )
        dispatcher.__memtap_original__ = original  # type: ignore[attr-defined]
        return dispatcher


def _prepared(call: Call) -> dict[str, Any]:
    """The call's keyword arguments with memtap's injection (``Call.prepare`` fails open)."""
    call_kwargs: dict[str, Any] = call.adapter_state
    body = call.app_body  # ``request_body(call_kwargs)``: ``begin``'s fallback body
    if body is None:
        return call_kwargs
    sent = call.prepare(body)
    return call_kwargs if sent is body else {**call_kwargs, **sent}


def _outcome(call: Call, result: Any) -> Any:
    provider = _provider_of(result)
    if provider:
        call.protocol = CHAT.for_provider(provider)
        call.span.set_attribute("gen_ai.provider.name", provider)
    if _is_stream(result):
        tap_stream(result, call, to_json)
    else:
        call.succeeded(result, to_json)
    return result


_taps: dict[int, _ModuleTaps] = {}
_taps_lock = threading.Lock()


def _acquire(module: Any) -> _ModuleTaps:
    with _taps_lock:
        taps = _taps.get(id(module))
        if taps is None:
            taps = _ModuleTaps(module)
            taps.install()
            _taps[id(module)] = taps
        taps.users += 1
        return taps


def _release(taps: _ModuleTaps) -> None:
    with _taps_lock:
        taps.users -= 1
        if taps.users <= 0:
            taps.uninstall()
            _taps.pop(id(taps.module), None)


class LiteLLMModuleAdapter:
    """Registers the ``litellm`` module: ``completion`` and ``acompletion``."""

    provider = "litellm"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Patch the module's functions; return the restore function."""
        taps = _acquire(client)
        taps.module_tap = tap

        def restore() -> None:
            taps.module_tap = None
            _release(taps)

        return restore


class LiteLLMRouterAdapter:
    """Registers one ``litellm.Router``: the calls it makes for ``completion`` and
    ``acompletion`` are tapped at the module functions it calls."""

    provider = "litellm"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Wrap the router instance's methods; return the restore function."""
        taps = _acquire(litellm_module())
        patches = Patches()
        patches.on_restore(lambda: _release(taps))
        with patches.all_or_nothing():
            for name in ROUTER_METHODS:
                patches.wrap(client, name, lambda original: _router_method(original, tap))
        return patches.restore


def _router_method(original: Callable[..., Any], tap: Tap) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(inspect.unwrap(original)):

        @functools.wraps(original)
        async def amethod(*args: Any, **kwargs: Any) -> Any:
            token = _router_tap.set(tap)
            try:
                return await original(*args, **kwargs)
            finally:
                _router_tap.reset(token)

        return amethod

    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        token = _router_tap.set(tap)
        try:
            result = original(*args, **kwargs)
        finally:
            _router_tap.reset(token)
        if inspect.isawaitable(result):
            return _with_router_tap(result, tap)
        return result

    return method


async def _with_router_tap(awaitable: Any, tap: Tap) -> Any:
    token = _router_tap.set(tap)
    try:
        return await awaitable
    finally:
        _router_tap.reset(token)
