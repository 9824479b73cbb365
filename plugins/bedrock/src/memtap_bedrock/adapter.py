"""Registering boto3 ``bedrock-runtime`` clients.

botocore creates a client's API methods on its (generated) class, so memtap sets wrappers
as attributes of the client *instance* and deletes them again on unregister. ``converse``
and ``converse_stream`` are injected through their keyword arguments (botocore validates
and serialises them afterwards); ``invoke_model`` and ``invoke_model_with_response_stream``
through their JSON ``body`` when it is an Anthropic Messages body (other model families
pass through untouched). boto3 and botocore are never imported here.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from memtap.sdk import VALIDATION_STATUSES, Call, Patches, Tap, tracked

from .anthropic import BedrockAnthropicProtocol, is_anthropic_body
from .converse import ConverseProtocol
from .streams import tap_event_stream

log = logging.getLogger("memtap.bedrock")

CONVERSE = ConverseProtocol()
ANTHROPIC = BedrockAnthropicProtocol()
SERVICE = "bedrock-runtime"


def is_bedrock_runtime_client(client: Any) -> bool:
    """Whether ``client`` is a botocore client for ``bedrock-runtime``."""
    if isinstance(client, type) or type(client).__module__ != "botocore.client":
        return False
    try:
        return bool(client.meta.service_model.service_name == SERVICE)
    except AttributeError:
        return False


def _identity(obj: Any) -> Mapping[str, Any] | None:
    return obj if isinstance(obj, Mapping) else None


def _json_bytes(data: Any) -> Mapping[str, Any] | None:
    parsed = json.loads(data)
    return parsed if isinstance(parsed, Mapping) else None


def _chunk_event(event: Any) -> Mapping[str, Any] | None:
    """An ``invoke_model_with_response_stream`` event's Anthropic event (``chunk.bytes``)."""
    chunk = event.get("chunk") if isinstance(event, Mapping) else None
    if not isinstance(chunk, Mapping) or "bytes" not in chunk:
        return None
    return _json_bytes(chunk["bytes"])


# -- converse ------------------------------------------------------------------------------


def is_validation_error(exc: BaseException) -> bool:
    """Whether a botocore ``ClientError`` is the service rejecting the request as invalid
    (HTTP 400/422: ``ValidationException``), not throttling, access or a server error."""
    response = getattr(exc, "response", None)
    if not isinstance(response, Mapping):
        return False
    metadata = response.get("ResponseMetadata")
    status = metadata.get("HTTPStatusCode") if isinstance(metadata, Mapping) else None
    return status in VALIDATION_STATUSES


def _converse(original: Callable[..., Any], tap: Tap, *, stream: bool) -> Callable[..., Any]:
    """``converse`` / ``converse_stream`` tracked: injected through their keyword arguments
    (``stream`` tells the protocol what kind of call this is; it is not sent)."""

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call | None:
        if args:
            return None
        return tap.begin(CONVERSE, fallback_body={**kwargs, "stream": True} if stream else kwargs)

    def attempt(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        body = call.app_body  # ``begin``'s fallback body
        send: Mapping[str, Any] = kwargs
        if body is not None:
            sent = call.prepare(body)
            if sent is not body:
                send = {k: v for k, v in sent.items() if k != "stream"} if stream else sent
        return original(**send)

    def outcome(call: Call, response: Any) -> Any:
        if stream:
            tap_event_stream(response["stream"], call, _identity)
        else:
            call.succeeded(response, _identity)
        return response

    return tracked(
        original, begin, outcome, attempt=attempt, rejected=is_validation_error, what="Bedrock Converse"
    )


# -- invoke_model (Anthropic bodies) ---------------------------------------------------------


def _read_body(raw: Any) -> Mapping[str, Any] | None:
    """The parsed JSON object of an ``invoke_model`` body (bytes, str, or a seekable file,
    left where it was), or ``None``."""
    data = raw
    if hasattr(raw, "read"):
        if not (hasattr(raw, "seek") and hasattr(raw, "tell")):
            return None
        position = raw.tell()
        data = raw.read()
        raw.seek(position)
    if not isinstance(data, (bytes, bytearray, str)):
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, Mapping) else None


def _invoke(original: Callable[..., Any], tap: Tap, *, stream: bool) -> Callable[..., Any]:
    """``invoke_model`` / ``invoke_model_with_response_stream`` tracked when their body is
    an Anthropic Messages request (others pass through): the body memtap reads is the
    parsed JSON with the call's ``modelId`` and ``stream``, which are not sent (unless the
    app's own body had them)."""

    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call | None:
        parsed = None if args else _read_body(kwargs.get("body"))
        if parsed is None or not is_anthropic_body(parsed):
            return None
        call = tap.begin(
            ANTHROPIC, fallback_body={"modelId": kwargs.get("modelId"), **parsed, "stream": stream}
        )
        call.adapter_state = parsed  # which keys the app's own body has
        return call

    def attempt(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        body = call.app_body  # ``begin``'s fallback body
        send = kwargs
        if body is not None:
            sent = call.prepare(body)
            if sent is not body:
                own = call.adapter_state
                wire = {k: v for k, v in sent.items() if k not in ("modelId", "stream") or k in own}
                send = {**kwargs, "body": json.dumps(wire, separators=(",", ":")).encode()}
        response = original(**send)
        if not stream:
            # Read here, so that a failure to read the answer is the call's; the app gets
            # an equivalent fresh body, and the outcome the bytes.
            call.adapter_state = _buffer_body(response)
        return response

    def outcome(call: Call, response: Any) -> Any:
        if stream:
            tap_event_stream(response["body"], call, _chunk_event)
        else:
            call.succeeded(call.adapter_state, _json_bytes)
        return response

    return tracked(original, begin, outcome, attempt=attempt, rejected=is_validation_error, what="Bedrock")


def _buffer_body(response: Any) -> bytes:
    """Read the response body once, give the caller an equivalent fresh ``StreamingBody``
    (same type, same bytes) and return the bytes."""
    body = response["body"]
    data: bytes = body.read()
    response["body"] = type(body)(io.BytesIO(data), len(data))
    return data


# -- the adapter ------------------------------------------------------------------------------


class BedrockRuntimeAdapter:
    """Patches one ``bedrock-runtime`` client instance."""

    provider = "bedrock"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        """Set the wrappers on the instance; return the function that deletes them."""
        methods = {
            "converse": (_converse, False),
            "converse_stream": (_converse, True),
            "invoke_model": (_invoke, False),
            "invoke_model_with_response_stream": (_invoke, True),
        }
        patches = Patches()
        with patches.all_or_nothing():
            for name, (wrap, stream) in methods.items():
                original = getattr(client, name, None)
                if original is not None:
                    patches.set(client, name, wrap(original, tap, stream=stream))
        return patches.restore
