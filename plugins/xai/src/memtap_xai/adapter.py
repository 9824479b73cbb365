"""Registering ``xai_sdk.Client`` and ``xai_sdk.AsyncClient``.

Every ``Chat`` a client creates (``client.chat.create(...)``) sends its requests through the
one gRPC stub of ``client.chat``: memtap replaces that stub instance's ``GetCompletion`` and
``GetCompletionChunk`` callables (instance attributes, put back on unregister). They receive
the ``GetCompletionsRequest`` the SDK has just built from the chat's messages, so chats
created before registration, ``sample``, ``stream``, ``parse`` and the batch variants are
all covered. The request is converted to JSON (protobuf's ``MessageToDict``) to be read,
and rebuilt (``ParseDict``) only when something is injected; otherwise the SDK's own proto
goes out untouched.

What the stub returns keeps working as before: the unary result is returned as is (the
async one through a proxy awaitable), and a stream is a proxy that observes messages and
forwards everything else (``cancel()``, ``code()``...) to gRPC's call object.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from memtap.sdk import Begin, Call, Patches, StreamTap, Tap, tracked

from .protocol import XaiChatProtocol

log = logging.getLogger("memtap.xai")

CHAT = XaiChatProtocol()


def is_xai_client(client: Any) -> bool:
    """Whether ``client`` is an ``xai_sdk`` sync or async client (xai_sdk not imported)."""
    if isinstance(client, type) or "xai_sdk" not in sys.modules:
        return False
    bases = tuple(
        cls
        for name in ("xai_sdk.sync.client", "xai_sdk.aio.client")
        if (cls := getattr(sys.modules.get(name), "Client", None)) is not None
    )
    return bool(bases) and isinstance(client, bases)


def to_json(message: Any) -> Mapping[str, Any] | None:
    """A proto message as JSON, with the proto's own field names."""
    from google.protobuf.json_format import MessageToDict

    result: Mapping[str, Any] = MessageToDict(message, preserving_proto_field_name=True)
    return result


def _from_json(data: Mapping[str, Any], like: Any) -> Any:
    from google.protobuf.json_format import ParseDict

    return ParseDict(dict(data), type(like)())


def _beginner(tap: Tap, *, stream: bool) -> Begin:
    """The ``begin`` of a stub callable: the call's body is the request proto as JSON."""

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        body = dict(to_json(args[0]) or {})
        if stream:
            body["stream"] = True  # tells the protocol the kind of call; never sent
        return tap.begin(CHAT, fallback_body=body)

    return begin


def is_invalid_argument(exc: BaseException) -> bool:
    """Whether a gRPC error is the server rejecting the request as invalid
    (``INVALID_ARGUMENT``), not an authentication, quota or server error."""
    code = getattr(exc, "code", None)
    if not callable(code):
        return False
    try:
        status = code()
    except Exception:
        return False
    return getattr(status, "name", None) == "INVALID_ARGUMENT"


def _prepared(call: Call, request: Any) -> Any:
    """The request to send: the SDK's own proto, or one rebuilt with memtap's injection."""
    body = call.app_body  # the request as JSON: ``begin``'s fallback body
    if body is None:
        return request
    sent = call.prepare(body)
    if sent is body:
        return request
    try:
        return _from_json({k: v for k, v in sent.items() if k != "stream"}, request)
    except Exception:
        log.exception("memtap could not rebuild an xAI request; sending it unchanged")
        return request


class _Stub:
    """A tapped stub callable (``GetCompletion``, ``GetCompletionChunk``): called like the
    original, whose other attributes it forwards."""

    def __init__(self, original: Any, call: Callable[..., Any]) -> None:
        self._original = original
        self._call = call

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def __call__(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        return self._call(request, *args, **kwargs)


def _stub(original: Any, tap: Tap, *, stream: bool, is_async: bool) -> _Stub:
    """``original`` tracked. A unary RPC's result is captured (``grpc.aio``'s when awaited,
    through :class:`_AwaitedCall`); a stream is observed by :class:`_TappedStream`. Both
    of the latter fail when read, not when started: they send the request once more if
    the server rejects memtap's changes (``start`` sends it again)."""

    def attempt(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not (stream or is_async):
            return original(_prepared(call, args[0]), *args[1:], **kwargs)

        def start() -> Any:
            return original(_prepared(call, args[0]), *args[1:], **kwargs)

        return (_TappedStream if stream else _AwaitedCall)(start(), call, start)

    outcome = _succeeded if not (stream or is_async) else _as_is
    begin = _beginner(tap, stream=stream)
    return _Stub(
        original, tracked(original, begin, outcome, attempt=attempt, rejected=is_invalid_argument, what="xAI")
    )


def _succeeded(call: Call, response: Any) -> Any:
    call.succeeded(response, to_json)
    return response


def _as_is(call: Call, result: Any) -> Any:
    return result


class _AwaitedCall:
    """An awaitable over a ``grpc.aio`` unary call that captures its result; ``remake()``
    starts the RPC again (for a request the server rejected because of memtap's changes)."""

    def __init__(self, inner: Any, call: Call, remake: Callable[[], Any]) -> None:
        self._inner = inner
        self._call = call
        self._remake = remake

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __await__(self) -> Any:
        try:
            response = yield from self._inner.__await__()
        except BaseException as exc:
            if not self._call.resend_after(exc, is_invalid_argument):
                self._call.failed(exc)
                raise
            response = _RESEND
        if response is _RESEND:
            try:
                self._inner = self._remake()
                response = yield from self._inner.__await__()
            except BaseException as exc:
                self._call.failed(exc)
                raise
        try:
            _succeeded(self._call, response)
        except Exception:
            log.exception("memtap could not capture an xAI response")
        return response


_RESEND = object()


class _TappedStream:
    """A gRPC response stream (sync or async) that reports its messages to the call and is
    finalised once: at its end, on an error, on ``cancel()``, or when dropped early. A
    stream the server rejects before its first message because of memtap's changes is
    started again without them (``remake()``)."""

    def __init__(self, inner: Any, call: Call, remake: Callable[[], Any]) -> None:
        self._inner = inner
        self._call = call
        self._tap = StreamTap(call, to_json)
        self._remake: Callable[[], Any] | None = remake
        self._aiter: Any = None

    def _resend(self, exc: BaseException) -> bool:
        """Whether the stream was started again after ``exc`` (once, before any message)."""
        remake, self._remake = self._remake, None
        if remake is None or not self._call.resend_after(exc, is_invalid_argument):
            return False
        self._inner = remake()
        self._aiter = None
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __iter__(self) -> _TappedStream:
        return self

    def __next__(self) -> Any:
        while True:
            try:
                chunk = next(self._inner)
            except StopIteration:
                self._tap.finish()
                raise
            except BaseException as exc:
                if self._resend(exc):
                    continue
                self._tap.finish(error=exc)
                raise
            self._remake = None
            self._tap.observe(chunk)
            return chunk

    def __aiter__(self) -> _TappedStream:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._aiter is None:
                self._aiter = self._inner.__aiter__()
            try:
                chunk = await self._aiter.__anext__()
            except StopAsyncIteration:
                self._tap.finish()
                raise
            except BaseException as exc:
                if self._resend(exc):
                    continue
                self._tap.finish(error=exc)
                raise
            self._remake = None
            self._tap.observe(chunk)
            return chunk

    def cancel(self) -> Any:
        """Cancel the RPC (reported as a partial answer)."""
        self._tap.finish(partial=True)
        return self._inner.cancel()

    def __del__(self) -> None:
        if not self._tap.done:
            self._tap.finish(partial=True)


class XaiAdapter:
    """Patches the chat stub of an ``xai_sdk`` client instance."""

    provider = "xai"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Replace the stub's completion callables; return the function that restores them."""
        is_async = type(client).__module__.startswith("xai_sdk.aio")
        stub = client.chat._stub
        patches = Patches()
        with patches.all_or_nothing():
            patches.wrap(
                stub, "GetCompletion", lambda original: _stub(original, tap, stream=False, is_async=is_async)
            )
            patches.wrap(
                stub,
                "GetCompletionChunk",
                lambda original: _stub(original, tap, stream=True, is_async=is_async),
            )
        return patches.restore
