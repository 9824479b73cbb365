"""What a matched text must also be to count as a secret: machine-made (:func:`looks_random`),
not a documentation placeholder, decodable credentials, a session-like cookie."""

from __future__ import annotations

import base64
import binascii
import math
import re

_RUN = re.compile(r"[A-Za-z0-9+/]{12,}")
_DIGIT_LETTER = re.compile(r"[0-9](?=[A-Za-z])|[A-Za-z](?=[0-9])")
#: What documentation writes where a value goes (``***``, ``<password>``, ``${PW}``...).
_PLACEHOLDER = re.compile(
    r"""(?ix)^(?:
        \**|x{3,}|\.{3}|…|<[^>]*>?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{[^}]*\}\}?|%\(?\w*\)?s|\{\w*\}
        |null|none|nil|true|false|undefined|string|str|text|redacted|\[redacted\]
        |pass|passw(?:or)?d|pwd|pw|secret|token|key|user(?:name)?
        |your[_-]?\w*|change[_-]?me|example|placeholder|env|required|optional
    )$"""
)
_HAS_DIGIT_AND_LETTER = re.compile(r"(?=.*\d)(?=.*[A-Za-z])")


def looks_random(value: str, min_run: int = 16) -> bool:
    """Whether ``value`` holds a run of at least ``min_run`` letters and digits that looks
    machine-made: letters and digits alternating at least twice (random base62 or hex
    does, within a few characters; words, identifiers and ``word2024`` do not)."""
    for m in _RUN.finditer(value):
        run = m.group()
        if len(run) >= min_run and len(_DIGIT_LETTER.findall(run)) >= 2:
            return True
    return False


def _entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for ch in value:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_LONG_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def _random_key(secret: str) -> bool:
    """``sk-...`` keys of any provider: an unbroken run of 20+ letters and digits, or a
    machine-made part ("sk-learn-compatible-estimators" has neither)."""
    return _LONG_RUN.search(secret) is not None or looks_random(secret, 16)


def _bearer(secret: str) -> bool:
    token = secret.split(None, 1)[-1]
    return looks_random(token, 12) or (len(token) >= 32 and _entropy(token) >= 3.5)


def _basic_credentials(secret: str) -> bool:
    """``Basic <base64>`` whose payload decodes to printable ``user:password``."""
    token = secret.split(None, 1)[-1]
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


def _discord_bot(secret: str) -> bool:
    """A Discord bot token's first segment is the bot's numeric id in base64."""
    head = secret.split(".", 1)[0]
    try:
        decoded = base64.b64decode(head + "=" * (-len(head) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return False
    return decoded.isdigit() and 15 <= len(decoded) <= 21


def _real_password(secret: str) -> bool:
    """Not a placeholder ("pass", "***", "<password>", "${PW}") of documentation."""
    return _PLACEHOLDER.match(secret) is None


def _aws_secret(secret: str) -> bool:
    return any(c.isdigit() for c in secret) and any(c.isupper() for c in secret) and not secret.isupper()


#: ``Set-Cookie`` attributes: their values (dates, ages, paths) are no one's session.
_COOKIE_ATTRIBUTES = frozenset(
    ("path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "partitioned", "priority")
)


def _cookie_header(value: str) -> bool:
    """A ``Cookie``/``Set-Cookie`` header value holding a session-like cookie: a value of
    8+ characters with letters and digits, or of 16+ (``theme=dark; Max-Age=3600`` is not)."""
    for pair in value.split(";"):
        name, sep, v = pair.partition("=")
        if not sep or name.strip().lower() in _COOKIE_ATTRIBUTES:
            continue
        v = v.strip().strip('"')
        if len(v) >= 16 or (len(v) >= 8 and _HAS_DIGIT_AND_LETTER.match(v)):
            return _PLACEHOLDER.match(v) is None
    return False


def _cookie_value(secret: str) -> bool:
    """A cookie-jar value worth hiding: 8+ characters, not a placeholder (a jar holds
    session cookies next to ``lang=en``; short values identify nobody)."""
    return len(secret) >= 8 and _PLACEHOLDER.match(secret) is None
