"""Telling a provider's validation rejection from its other errors.

When a provider rejects a request memtap changed, the rejection may be memtap's doing (an
injected history the provider finds invalid, a memory block that overflows the context), so
memtap sends the request again as the application built it (:meth:`memtap.request.tap.Call.send`).
Only validation rejections qualify: HTTP 400 and 422 (and a provider's own equivalent, such
as gRPC's ``INVALID_ARGUMENT``), never authentication, permission, rate-limit or server
errors, which the same request would meet again.

The default classifier reads the HTTP status the way the common SDKs expose it, without
importing any of them; a provider plugin whose SDK reports errors otherwise passes its own.
"""

from __future__ import annotations

from collections.abc import Callable

#: HTTP statuses that mean "this request is invalid".
VALIDATION_STATUSES = frozenset({400, 422})

#: Decides whether an exception is a validation rejection of the request.
Classifier = Callable[[BaseException], bool]


def _as_status(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an SDK error carries: ``status_code`` (openai, anthropic, litellm,
    httpx), ``code`` (google-genai), ``status`` or ``response.status_code``; ``None`` when
    it carries none (a connection error, a timeout, a cancellation)."""
    for name in ("status_code", "code", "status"):
        status = _as_status(getattr(exc, name, None))
        if status is not None:
            return status
    return _as_status(getattr(getattr(exc, "response", None), "status_code", None))


def is_validation_rejection(exc: BaseException) -> bool:
    """Whether ``exc`` is the provider rejecting the request as invalid (HTTP 400/422)."""
    if not isinstance(exc, Exception):  # KeyboardInterrupt, cancellation, ...
        return False
    return http_status(exc) in VALIDATION_STATUSES


def describe(exc: BaseException, limit: int = 300) -> str:
    """One line naming a rejection, for the log (the provider's message, shortened)."""
    status = http_status(exc)
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[:limit] + "…"
    head = f"HTTP {status}" if status is not None else type(exc).__name__
    return f"{head}: {text}" if text else head
