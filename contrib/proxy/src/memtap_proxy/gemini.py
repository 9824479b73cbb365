"""Google's Gemini API through the proxy: which paths are Gemini's, the model a request
names in its URL, and the proxy's own answers (``mem:`` commands) in Gemini's shape.

Gemini names the model in the path (``/v1beta/models/{model}:generateContent``), not in
the body, and streams when the method is ``:streamGenerateContent`` (SSE with ``?alt=sse``,
else one JSON array). Reading and writing the bodies is the google plugin's wire protocol
(``google.generate_content``, the same code as in-process mode); this module only adds
what the URL says.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

#: The family name of Gemini requests, and the wire protocol memtap-google registers.
FAMILY = "gemini"
PROTOCOL = "google.generate_content"
#: Where Gemini requests go unless ``--gemini-upstream`` says otherwise.
DEFAULT_UPSTREAM = "https://generativelanguage.googleapis.com"

#: The Gemini API's versions: a path under one of them is Gemini's whatever it does
#: (model lists, ``countTokens``, files, caches...). ``/v1/`` is shared with OpenAI: only
#: its ``models/...:method`` paths are Gemini's.
VERSIONS = ("/v1beta/", "/v1alpha/", "/upload/v1beta/")
_MODEL_CALL = re.compile(r"^/v1(?:beta|alpha)?/(?:models|tunedModels)/([^/:]+):([A-Za-z]+)$")
#: The methods memtap reads (the others, e.g. ``countTokens``, are passed through).
GENERATE = "generateContent"
STREAM = "streamGenerateContent"
#: The model methods that make a ``/v1/models/{model}:{method}`` path Gemini's (OpenAI's
#: fine-tuned model names hold colons too: ``/v1/models/ft:gpt-4o:acme::id``).
METHODS = frozenset(
    {GENERATE, STREAM, "countTokens", "embedContent", "batchEmbedContents", "batchGenerateContent"}
)


def is_gemini_path(path: str) -> bool:
    """Whether ``path`` (agent prefix removed, no query) is the Gemini API's."""
    if path.startswith(VERSIONS):
        return True
    call = model_call(path)
    return call is not None and call[1] in METHODS


#: Headers only Google's SDKs send (``/v1/models`` is both Gemini's and OpenAI's path).
GOOGLE_HEADERS = (b"x-goog-api-key", b"x-goog-api-client")


def is_gemini_request(headers: Iterable[tuple[bytes, bytes]], query: bytes) -> bool:
    """Whether a request on a path both APIs have (``/v1/models``) is Gemini's: a Google
    SDK's header, or the API key in ``?key=``."""
    if any(name.lower() in GOOGLE_HEADERS for name, _ in headers):
        return True
    return any(field.startswith(b"key=") for field in query.split(b"&"))


def model_call(path: str) -> tuple[str, str] | None:
    """``(model, method)`` of a ``.../models/{model}:{method}`` path, else ``None``."""
    match = _MODEL_CALL.match(path)
    return (match.group(1), match.group(2)) if match else None


def stream_mode(path: str, query: bytes) -> str | None:
    """How a model call's answer comes: ``"json"`` (``generateContent``), ``"sse"``
    (``streamGenerateContent?alt=sse``), ``"array"`` (``streamGenerateContent`` without
    ``alt=sse``), ``None`` for any other path."""
    call = model_call(path)
    if call is None or call[1] not in (GENERATE, STREAM):
        return None
    if call[1] == GENERATE:
        return "json"
    return "sse" if b"alt=sse" in query.split(b"&") else "array"


def with_url_model(body: Mapping[str, Any], model: str | None) -> Mapping[str, Any]:
    """The body as memtap reads and captures it: with the URL's model under ``model``
    (Gemini bodies name none). ``body`` itself when there is nothing to add."""
    if model is None or "model" in body:
        return body
    return {**body, "model": model}


def without_url_model(prepared: Mapping[str, Any], read: Mapping[str, Any], body: Mapping[str, Any]) -> Any:
    """What to send of ``prepared`` (the injected form of ``read``, itself
    :func:`with_url_model` of the client's ``body``): the model memtap added is never sent."""
    if read is body:
        return prepared
    return {k: v for k, v in prepared.items() if k != "model"}


# -- the proxy's own answers -----------------------------------------------------------------


def _response(text: str, model: str) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0},
        "modelVersion": model,
        "responseId": "memtap" + uuid.uuid4().hex[:20],
    }


def answer(text: str, model: str, mode: str) -> tuple[bytes, str]:
    """``(bytes, content type)`` of a Gemini answer made of ``text``, in the request's
    ``mode`` (:func:`stream_mode`), so Google's SDKs and Gemini CLI read it as the model's."""
    data = _response(text, model)
    encoded = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    if mode == "sse":
        return b"data: " + encoded + b"\r\n\r\n", "text/event-stream; charset=utf-8"
    if mode == "array":
        return b"[" + encoded + b"]", "application/json; charset=utf-8"
    return encoded, "application/json; charset=utf-8"


def error_body(status: int, message: str) -> bytes:
    """An error as the Gemini API words one (``google-genai`` reads ``error.message``)."""
    names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}
    names |= {413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 502: "UNAVAILABLE", 503: "UNAVAILABLE"}
    body = {"error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
