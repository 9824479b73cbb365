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

from memtap.sdk import Call, Tap

from .protocol import XaiChatProtocol

log = logging.getLogger("memtap.xai")

CHAT = XaiChatProtocol()
_MISSING = object()


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


def _begin(tap: Tap, request: Any, *, stream: bool) -> tuple[Call | None, dict[str, Any]]:
    try:
        body = dict(to_json(request) or {})
        if stream:
            body["stream"] = True  # tells the protocol the kind of call; never sent
        return tap.begin(CHAT, fallback_body=body), body
    except Exception:
        log.exception("memtap could not start tracking an xAI call; it proceeds untracked")
        return None, {}


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


def _prepared(call: Call, request: Any, body: dict[str, Any]) -> Any:
    """The request to send: the SDK's own proto, or one rebuilt with memtap's injection."""
    sent = call.prepare(body)
    if sent is body:
        return request
    try:
        return _from_json({k: v for k, v in sent.items() if k != "stream"}, request)
    except Exception:
        log.exception("memtap could not rebuild an xAI request; sending it unchanged")
        return request


class _Unary:
    """A tapped ``GetCompletion``: the same call signature, other attributes forwarded."""

    def __init__(self, original: Any, tap: Tap, is_async: bool) -> None:
        self._original = original
        self._tap = tap
        self._is_async = is_async

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def __call__(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        call, body = _begin(self._tap, request, stream=False)
        if call is None:
            return self._original(request, *args, **kwargs)

        def attempt() -> Any:
            return self._original(_prepared(call, request, body), *args, **kwargs)

        if self._is_async:
            # The RPC fails when awaited: the awaitable sends it again if it must.
            with call.active():
                try:
                    pending = attempt()
                except BaseException as exc:
                    call.failed(exc)
                    raise
            return _AwaitedCall(pending, call, attempt)
        result = call.send(attempt, rejected=is_invalid_argument)
        _succeeded(call, result)
        return result


def _succeeded(call: Call, response: Any) -> None:
    try:
        call.succeeded(response, to_json)
    except Exception:
        log.exception("memtap could not capture an xAI response")


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
        _succeeded(self._call, response)
        return response


class _Streaming:
    """A tapped ``GetCompletionChunk``."""

    def __init__(self, original: Any, tap: Tap, is_async: bool) -> None:
        self._original = original
        self._tap = tap
        self._is_async = is_async

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def __call__(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        call, body = _begin(self._tap, request, stream=True)
        if call is None:
            return self._original(request, *args, **kwargs)

        def attempt() -> Any:
            return self._original(_prepared(call, request, body), *args, **kwargs)

        with call.active():
            try:
                result = attempt()
            except BaseException as exc:
                call.failed(exc)
                raise
        return _TappedStream(result, call, attempt)


_RESEND = object()


class _TappedStream:
    """A gRPC response stream (sync or async) that reports its messages to the call and is
    finalised once: at its end, on an error, on ``cancel()``, or when dropped early. A
    stream the server rejects before its first message because of memtap's changes is
    started again without them (``remake()``)."""

    def __init__(self, inner: Any, call: Call, remake: Callable[[], Any]) -> None:
        self._inner = inner
        self._call = call
        self._remake: Callable[[], Any] | None = remake
        self._aiter: Any = None
        self._done = False

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

    def _finish(self, error: BaseException | None = None, partial: bool = False) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._call.stream_finished(to_json, error=error, partial=partial)
        except Exception:
            log.exception("memtap could not capture an xAI stream")

    def _observe(self, chunk: Any) -> None:
        try:
            self._call.stream_item(chunk)
        except Exception:
            log.exception("memtap could not observe an xAI stream chunk")

    def __iter__(self) -> _TappedStream:
        return self

    def __next__(self) -> Any:
        while True:
            try:
                chunk = next(self._inner)
            except StopIteration:
                self._finish()
                raise
            except BaseException as exc:
                if self._resend(exc):
                    continue
                self._finish(error=exc)
                raise
            self._remake = None
            self._observe(chunk)
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
                self._finish()
                raise
            except BaseException as exc:
                if self._resend(exc):
                    continue
                self._finish(error=exc)
                raise
            self._remake = None
            self._observe(chunk)
            return chunk

    def cancel(self) -> Any:
        """Cancel the RPC (reported as a partial answer)."""
        self._finish(partial=True)
        return self._inner.cancel()

    def __del__(self) -> None:
        if not self._done:
            self._finish(partial=True)


class XaiAdapter:
    """Patches the chat stub of an ``xai_sdk`` client instance."""

    provider = "xai"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Replace the stub's completion callables; return the function that restores them."""
        is_async = type(client).__module__.startswith("xai_sdk.aio")
        stub = client.chat._stub
        undo = [
            _set_instance_attr(stub, "GetCompletion", _Unary(stub.GetCompletion, tap, is_async)),
            _set_instance_attr(
                stub, "GetCompletionChunk", _Streaming(stub.GetCompletionChunk, tap, is_async)
            ),
        ]

        def restore() -> None:
            for step in reversed(undo):
                step()

        return restore


def _set_instance_attr(obj: Any, name: str, value: Any) -> Callable[[], None]:
    previous = vars(obj).get(name, _MISSING)
    setattr(obj, name, value)

    def undo() -> None:
        if previous is _MISSING:
            try:
                delattr(obj, name)
            except AttributeError:
                pass
        else:
            setattr(obj, name, previous)

    return undo
