"""Secret redaction: credentials found in text, JSON and URLs are replaced before anything
is stored, spooled, exported, traced or logged.

A leaf module (the standard library, pydantic-core's JSON encoder when it is installed, and
memtap's record types for :func:`redact_exchange` and :func:`redact_fact`): the spool, the
capture path, long-term memory, the CLI and plugins all use it. Public API:
:func:`redact_text`, :func:`redact_json`, :func:`redact_url`, :func:`redact_exchange`,
:func:`redact_fact`, :func:`find_secrets`, :data:`REDACTED` and :class:`RedactingFilter`
(for loggers); for the spool, :func:`redact_stream_events`, :func:`dumps_redacted_record`
and :func:`encode_json`.

**Why not a detector library.** Yelp's detect-secrets (the best known, last released in
2024) scans a line with every plugin's regexes in turn and reports values, not positions:
on this machine it took 1.1 s for 70 KB of agent text, where a request must cost well under
a millisecond, and its patterns start with word boundaries that JSON escapes defeat (the
defect this module fixes). trufflehog/gitleaks are Go binaries; hyperscan and Aho-Corasick
bindings are compiled dependencies that still need the per-format rules below. The formats
are public (the providers document their prefixes), so the rules are written here, tested
one by one against a corpus of fake keys and a corpus of ordinary text.

**How it stays fast.** Python's regex engine searches fastest for a pattern that starts
with one literal character (a ``memchr``-like loop, ~0.6 µs/KB here), and is slow for an
alternation or a character class at the start (5-50x slower). So every detector names a
*pivot*: one character every match of it contains at a fixed offset (``-`` in ``sk-``,
``_`` in ``ghp_``, ``.`` in ``SG.``, ``J`` in ``eyJ``, ``=``/``:`` of ``password=``...).
There is one compiled pattern per pivot: the pivot, then *gates*, cheap lookarounds tried
right after it (for most detectors merged: what precedes the pivot, as lookbehinds
grouped by width, and a minimum run of key characters after it). A pivot in ordinary text
("task-notification", "risk-first", ``"type":``) fails a gate inside the regex engine in
a few nanoseconds; Python decides only the candidates a gate lets through, with the full
formats of that gate's detectors. Texts are scanned once per distinct content:
:func:`redact_text` caches results (an agent's system prompt and tool definitions are the
same on every call), and :func:`redact_json` joins all the new strings of a structure into
one text and scans it once.

**Boundaries.** A secret must not start inside a word (that is what keeps ``sk-`` in
"task-notification" out), but JSON text puts letters right before it: ``\\nsk-...`` or
``\\u000bAKIA...``. A secret may therefore start after a non-alphanumeric character, after
a JSON escape (``\\n``, ``\\t``, ``\\r``, ``\\b``, ``\\f``, ``\\uXXXX``), a URL escape
(``%0A``) or a terminal colour code (``\\x1b[0m``). Replacements never split an escape,
so redacted JSON text stays valid JSON.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import functools
import hashlib
import json
import logging
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs

from memtap.protocol.model import Exchange, Fact, Message, install_id_filter

__all__ = [
    "DETECTORS",
    "REDACTED",
    "URL_MASK",
    "Detector",
    "RedactingFilter",
    "clear_cache",
    "dumps_redacted",
    "dumps_redacted_record",
    "encode_json",
    "find_secrets",
    "guard_loggers",
    "is_secret_value",
    "key_kind",
    "looks_random",
    "new_text",
    "redact_exchange",
    "redact_fact",
    "redact_id",
    "redact_json",
    "redact_optional_id",
    "redact_stream",
    "redact_stream_events",
    "redact_text",
    "redact_url",
]

#: What a secret is replaced with in text.
REDACTED = "[REDACTED]"
#: What a password or secret parameter is replaced with in a URL shown to a person.
URL_MASK = "***"

#: No secret format is shorter than this (``pwd=abc1``).
MIN_SECRET_CHARS = 7


# -- validators -------------------------------------------------------------------------

_RUN = re.compile(r"[A-Za-z0-9+/]{12,}")
_DIGIT_LETTER = re.compile(r"[0-9](?=[A-Za-z])|[A-Za-z](?=[0-9])")


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


# -- detectors --------------------------------------------------------------------------


@dataclass(frozen=True)
class Detector:
    """One credential format.

    A match is ``before`` + ``pivot`` + ``after``: ``pivot`` is one character every match
    contains, ``before`` a regex of fixed width (may be empty), ``after`` a regex.
    ``check`` validates the matched text; ``secret`` names a group of ``after`` that is the
    part to replace (default: the whole match); ``extend`` is a character class the match
    is extended over to the left (for formats whose start has no fixed width);
    ``boundary`` requires the match to start a word (escape-aware, see the module doc).
    ``gate`` is the cheap test, right after the pivot, that makes a position a candidate
    (default: ``before`` as a lookbehind, merged with the pivot's other detectors, and the
    pivot's :data:`PIVOT_AHEAD`; or the whole ``after`` when ``before`` is empty).
    Each detector is tested on fake values in ``memtap.testing.secrets``.
    """

    name: str
    pivot: str
    before: str
    after: str
    check: Callable[[str], bool] | None = None
    secret: str | None = None
    extend: str | None = None
    boundary: bool = True
    gate: str | None = None


_D = Detector
_TOK = r"[A-Za-z0-9_-]"
_SL = r"\\*/"  # a slash, escaped or not (some JSON encoders write "\/", nested JSON "\\\/")
_TAB = r"(?:\t|\\+t)"  # a tab, or its JSON escape (nested JSON: "\\\\t"...)

DETECTORS: tuple[Detector, ...] = (
    # -- "-" ---------------------------------------------------------------------
    _D("anthropic", "-", "sk", r"ant-[a-z]{2,10}\d{2}-[A-Za-z0-9_-]{20,}"),
    _D("openai-project", "-", "sk", r"(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}"),
    _D("openrouter", "-", "sk", r"or-v1-[a-f0-9]{32,}"),
    _D("openai", "-", "sk", r"(?:[a-z]{2,12}-)?[A-Za-z0-9_-]{16,}", check=_random_key),
    _D("xai", "-", "xai", r"[A-Za-z0-9]{20,}"),
    _D("slack-token", "-", "xox[abposre]", r"[A-Za-z0-9-]{10,}"),
    _D("slack-app-token", "-", "xapp", r"\d-[A-Za-z0-9-]{10,}"),
    _D("gitlab", "-", "gl(?:pat|ptt|cbt|oas|imt)", r"[A-Za-z0-9_-]{20,}"),
    _D("gitlab-deploy", "-", "gl(?:dt|rt|ft)", r"[A-Za-z0-9_-]{20,}"),
    _D("pypi", "-", "pypi", r"Ag[A-Za-z0-9_-]{50,}"),
    _D("mailgun", "-", "key", r"[0-9a-f]{32}(?![A-Za-z0-9])"),
    _D("perplexity", "-", "pplx", r"[A-Za-z0-9]{40,}"),
    _D("postman", "-", "PMAK", r"[0-9a-f]{24}-[0-9a-f]{34}"),
    _D("newrelic", "-", "NRAK", r"[A-Z0-9]{27}"),
    _D("heroku", "-", "HRKU", r"[A-Za-z0-9_-]{30,}"),
    _D("google-oauth-secret", "-", "GOCSPX", r"[A-Za-z0-9_-]{28}"),
    _D("age", "-", "AGE-SECRET-KEY", r"1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    _D("square", "-", "sq0(?:atp|csp)", r"[A-Za-z0-9_-]{22,}"),
    _D("mailchimp", "-", "[0-9a-f]{32}", r"us\d{1,2}(?![A-Za-z0-9])", gate=r"(?=us\d)(?<=[0-9a-f]{32}-)"),
    _D("private-key", "-", "", r"----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[^\x00]{0,20000}?"
       r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s\\:-]*)", gate="(?=----BEGIN )"),
    # -- "_" ---------------------------------------------------------------------
    _D("stripe", "_", "[sr]k_(?:live|test)", r"[A-Za-z0-9]{20,}"),
    _D("stripe-webhook", "_", "whsec", r"[A-Za-z0-9+/]{24,}"),
    _D("github", "_", "gh[pousr]", r"[A-Za-z0-9]{30,}"),
    _D("github-pat", "_", "github_pat", r"[A-Za-z0-9_]{22,}"),
    _D("huggingface", "_", "hf", r"[A-Za-z0-9]{30,}"),
    _D("huggingface-org", "_", "api_org", r"[A-Za-z0-9]{30,}"),
    _D("npm", "_", "npm", r"[A-Za-z0-9]{36,}"),
    _D("digitalocean", "_", "do[opr]_v1", r"[a-f0-9]{64}"),
    _D("shopify", "_", "shp(?:at|ca|pa|ss)", r"[a-fA-F0-9]{32}"),
    _D("linear", "_", "lin_api", r"[A-Za-z0-9]{40,}"),
    _D("notion", "_", "secret", r"[A-Za-z0-9]{43}(?![A-Za-z0-9])"),
    _D("notion-ntn", "_", "ntn", r"[A-Za-z0-9]{40,}"),
    _D("groq", "_", "gsk", r"[A-Za-z0-9]{48,}"),
    _D("replicate", "_", "r8", r"[A-Za-z0-9]{37,}"),
    _D("grafana-cloud", "_", "glc", r"[A-Za-z0-9+/]{32,}={0,2}"),
    _D("grafana-service-account", "_", "glsa", r"[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    _D("figma", "_", "figd", r"[A-Za-z0-9_-]{40,}"),
    _D("sentry", "_", "sntry[su]", r"[A-Za-z0-9+/=_]{40,}"),
    # -- "." ---------------------------------------------------------------------
    _D("sendgrid", ".", "SG", r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
    _D("google-oauth-token", ".", "ya29", r"[A-Za-z0-9_-]{20,}"),
    _D("vault", ".", "hv[sb]", r"[A-Za-z0-9_-]{24,}"),
    _D("slack-webhook", ".", "hooks",
       rf"slack\.com{_SL}(?:services|workflows|triggers){_SL}(?:[A-Za-z0-9_+-]|{_SL}){{20,}}",
       gate=r"(?=slack\.com)(?<=hooks\.)"),
    _D("discord-webhook", ".", "discord", rf"com{_SL}api{_SL}webhooks{_SL}\d+{_SL}{_TOK}{{20,}}",
       gate=r"(?=com\\*/api)(?<=discord\.)"),
    _D("discordapp-webhook", ".", "discordapp", rf"com{_SL}api{_SL}webhooks{_SL}\d+{_SL}{_TOK}{{20,}}",
       gate=r"(?=com\\*/api)(?<=discordapp\.)"),
    _D("terraform", ".", "[A-Za-z0-9]{14}", r"atlasv1\.[A-Za-z0-9_=-]{60,}", gate=r"(?=atlasv1\.)"),
    _D("discord-bot", ".", "[A-Za-z0-9_-]{24}", rf"{_TOK}{{6}}\.{_TOK}{{27,}}", check=_discord_bot,
       extend="A-Za-z0-9_-", gate=rf"(?={_TOK}{{6}}\.{_TOK}{{27}})(?<=[A-Za-z0-9_-]{{24}}\.)"),
    _D("dropbox", ".", "sl", rf"{_TOK}{{130,}}"),
    _D("doppler", ".", r"dp\.pt", r"[A-Za-z0-9]{40,}"),
    # -- letters -----------------------------------------------------------------
    _D("aws-access-key-id", "A", "", r"(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    _D("google-api-key", "A", "", r"Iza[A-Za-z0-9_-]{33,}"),
    _D("atlassian", "A", "", r"TATT3[A-Za-z0-9_=-]{50,}"),
    _D("bitbucket", "A", "", r"TBB[A-Za-z0-9_=.-]{28,}"),
    _D("facebook", "A", "E", r"A[A-Za-z0-9]{80,}", gate="(?=A[A-Za-z0-9]{40})(?<=EA)"),
    _D("firebase-fcm", "A", "", rf"AAA{_TOK}{{7}}:{_TOK}{{100,}}"),
    _D("jwt", "J", "ey", rf"{_TOK}{{8,}}\.eyJ{_TOK}{{8,}}\.{_TOK}*", gate=r"(?=[A-Za-z0-9_-]{8})(?<=eyJ)"),
    _D("twilio", "K", "S", r"[0-9a-fA-F]{32}(?![A-Za-z0-9])", gate="(?=[0-9a-fA-F]{32})(?<=SK)"),
    _D("azure-ad-client-secret", "Q", r"[A-Za-z0-9_.-]{3}\d", r"~[A-Za-z0-9_.~-]{31,34}", gate="(?=~)"),
    _D("databricks", "p", "da", r"i[a-f0-9]{32}(?:-\d)?(?![A-Za-z0-9])", gate="(?=i[a-f0-9]{32})(?<=dap)"),
    _D("bearer", "B", "", r"(?:earer|EARER)\s+[A-Za-z0-9._~+/=-]{16,}", check=_bearer),
    _D("bearer-lowercase", "b", "", r"earer\s+[A-Za-z0-9._~+/=-]{16,}", check=_bearer),
    _D("basic-auth", "B", "", r"(?:asic|ASIC)\s+[A-Za-z0-9+/]{8,}={0,2}", check=_basic_credentials),
    _D("basic-auth-lowercase", "b", "", r"asic\s+[A-Za-z0-9+/]{8,}={0,2}", check=_basic_credentials),
    # -- ":" ---------------------------------------------------------------------
    _D("url-credentials", ":", "",
       rf"{_SL}{_SL}[^\s\x00/@:\"'\\<>]{{0,128}}:(?P<pw>[^\s\x00/@\"'\\<>]{{1,256}})@",
       secret="pw", boundary=False, check=_real_password),
    # A key as the URL's user name: Sentry DSNs (https://<key>@o1.ingest.sentry.io/2),
    # https://<token>@github.com/... (with a password, "url-credentials" takes it).
    _D("url-token-user", ":", "", rf"{_SL}{_SL}(?P<user>[A-Za-z0-9_.~%+-]{{16,256}})@[A-Za-z0-9]",
       secret="user", boundary=False, check=looks_random),
    # -- "E" (of TRUE/FALSE): a Netscape cookies.txt line, domain flag path SECURE expiry name
    # value, tab-separated (``\t`` in JSON text); the value goes.
    _D("cookie-jar", "E", "",
       rf"{_TAB}\d{{1,12}}{_TAB}[^\t\r\n\\\"]{{1,256}}{_TAB}(?P<v>[^\t\r\n\\\"]{{1,4096}})", secret="v",
       boundary=False, check=_cookie_value, gate=rf"(?={_TAB}\d)(?<=TRUE|ALSE)"),
    _D("telegram-bot", ":", r"\d{8}", rf"AA{_TOK}{{33}}(?![A-Za-z0-9_-])", extend="0-9", boundary=False,
       gate=r"(?=AA)(?<=\d:)"),
)  # fmt: skip


# -- assignments: key = value, "key": "value", --key value -----------------------------

_PASSWORD_KEYS = re.compile(r"(?:passw(?:or)?d|pwd|passphrase|(?:^|[_.-])pass)$")
_HEADER_KEYS = re.compile(r"authorization$")
_COOKIE_KEYS = re.compile(r"cookie$")
_RANDOM_KEYS = re.compile(r"(?:key|secret|token|auth|credentials?|sig|signature)$")
#: Keys ending like secrets whose values are not (ids, hashes, pagination).
_NOT_SECRET_KEYS = re.compile(
    r"public|cache|hash|sort|primary|foreign|partition|idempot|dedup|page|next|checksum"
)
_PLACEHOLDER = re.compile(
    r"""(?ix)^(?:
        \**|x{3,}|\.{3}|…|<[^>]*>?|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{[^}]*\}\}?|%\(?\w*\)?s|\{\w*\}
        |null|none|nil|true|false|undefined|string|str|text|redacted|\[redacted\]
        |pass|passw(?:or)?d|pwd|pw|secret|token|key|user(?:name)?
        |your[_-]?\w*|change[_-]?me|example|placeholder|env|required|optional
    )$"""
)
#: An unquoted value that is code, not a literal: ``self.password``, ``db_password``.
_CODE_REFERENCE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$|^[A-Za-z_]*(?:passw|pwd|secret|token|key)[A-Za-z_]*$",
    re.IGNORECASE,
)
_PLAIN_WORD = re.compile(r"^[a-z]+$")
_OPENING = re.compile(r"[ \t]{0,3}(\\*[\"'`])?")
_QUOTED_BY = {
    '"': re.compile(r'(?:[^"\\\x00-\x1f]|\\[^nrt\x00-\x1f])*'),
    "'": re.compile(r"[^'\x00-\x1f]*"),
    "`": re.compile(r"[^`\x00-\x1f]*"),
}
#: An unquoted value: up to a blank, a quote, a delimiter or an escape (``\/`` and an
#: escaped backslash continue it; ``\\n``, ``\\u001b``: JSON nested once more, end it).
_UNQUOTED = re.compile(r"(?:[^\s\x00-\x1f\"'`&,;)(<>\[\]{}\\]|\\+/|\\\\(?![\\nrtbfu]))*")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_HEADER_VALUE = re.compile(r"(?:[^\x00-\x1f\"'`\\]|\\(?![nrt\"]))*")
_CONTROL_OR_ESCAPED_NEWLINE = re.compile(r"[\x00-\x1f]|\\+[nr]")
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/=._~-]{8,}")
_HAS_DIGIT_AND_LETTER = re.compile(r"(?=.*\d)(?=.*[A-Za-z])")
_MAX_VALUE = 512


def key_kind(key: str) -> str | None:
    """How a value assigned to ``key`` is judged: ``"password"`` (any real value),
    ``"header"`` (an ``Authorization`` header's whole value), ``"cookies"`` (a ``Cookie``
    or ``Set-Cookie`` header's whole value, when a cookie in it holds a session-like
    value), ``"random"`` (a value that looks machine-made), or ``None`` (not a secret's
    name)."""
    k = key.lower().strip("\"'`-")
    if _PASSWORD_KEYS.search(k):
        return "password"
    if _HEADER_KEYS.search(k):
        return "header"
    if _COOKIE_KEYS.search(k):
        return "cookies"
    if _RANDOM_KEYS.search(k) and not _NOT_SECRET_KEYS.search(k):
        return "random"
    return None


def is_secret_value(kind: str, value: str, *, quoted: bool = True, separator: str = "=") -> bool:
    """Whether ``value``, assigned to a key of ``kind`` (:func:`key_kind`), is a secret.

    Passwords: any value but placeholders (``***``, ``<password>``, ``${PW}``...); unquoted,
    not a reference to code (``password=self.password``), and after ``:`` not a plain
    lowercase word ("password: forgotten" is prose; ``password: hunter2`` is not). Header
    values: a token of 8+ characters with letters and digits, or Basic credentials. Other keys: a
    machine-made value (:func:`looks_random`).
    """
    v = value.strip()
    if not v or _PLACEHOLDER.match(v):
        return False
    if kind == "password":
        if not quoted and _CODE_REFERENCE.search(v):
            return False
        return len(v) >= 3 and (quoted or separator == "=" or not _PLAIN_WORD.match(v))
    if kind == "cookie":
        return _cookie_value(v)
    if kind == "cookies":
        return _cookie_header(v)
    if kind == "header":
        return any(_HAS_DIGIT_AND_LETTER.search(run) for run in _TOKEN_RUN.findall(v)) or _basic_credentials(
            v
        )
    return looks_random(v, 16)


_KEY_REVERSED = re.compile(r"[ \t]{0,2}(?:[\"'`]\\*)?([A-Za-z0-9_.-]{1,64})")


def _key_before(text: str, pivot: int) -> str:
    """The key name ending right before ``pivot`` (blanks and a closing quote, escaped or
    not, skipped); read on the reversed window, where a regex can match it forward."""
    window = text[max(0, pivot - 80) : pivot][::-1]
    m = _KEY_REVERSED.match(window)
    return m.group(1)[::-1] if m else ""


def _assignment(text: str, pivot: int) -> tuple[int, int] | None:
    """The value span of ``key<pivot>value`` (``=`` or ``:`` at ``pivot``) when it is a secret."""
    key = _key_before(text, pivot)
    kind = _key_kind_cached(key)
    if kind is None:
        return _har_value(text, pivot) if key == "value" and text[pivot] == ":" else None
    return _value_span(text, pivot + 1, kind, text[pivot])


def _value_span(text: str, at: int, kind: str, separator: str) -> tuple[int, int] | None:
    """The span of the value starting at ``at`` (after optional blanks and an opening
    quote) when it is a secret for a key of ``kind``."""
    opening = _OPENING.match(text, at)
    assert opening is not None
    quote_mark = opening.group(1)
    start = opening.end()
    limit = min(len(text), start + _MAX_VALUE)
    if quote_mark and len(quote_mark) > 1:  # \" in JSON text (\\\" one level deeper...)
        close = text.find(quote_mark, start, limit)
        end = close if close >= 0 else limit
        newline = _CONTROL_OR_ESCAPED_NEWLINE.search(text, start, end)
        end = newline.start() if newline else end
    else:
        unquoted = not quote_mark and kind != "header" and kind != "cookies"
        pattern = _QUOTED_BY[quote_mark] if quote_mark else _UNQUOTED if unquoted else _HEADER_VALUE
        value = pattern.match(text, start, limit)
        assert value is not None
        end = value.end()
        if unquoted and end < len(text) and text[end] in "([" and _IDENTIFIER.fullmatch(text, start, end):
            return None  # password=get_password(), token=tokens[0]: code
    if not is_secret_value(kind, text[start:end], quoted=bool(quote_mark), separator=separator):
        return None
    return start, end


_CLI_FLAG = re.compile(
    r"(?:-(?P<name>password|passwd|pass|token|api-key|apikey|secret|client-secret|access-token|auth-token"
    r"|cookie)|(?P<short>b)(?=[ \t]+(?:\\*[\"'])?[A-Za-z0-9_.-]{1,64}=))"
    r"(?P<sep>=|[ \t]+)"
)


def _cli_flag(text: str, pivot: int) -> tuple[int, int] | None:
    """``--password hunter2`` / ``--token=...`` / curl's ``--cookie 'sid=...'`` and
    ``-b 'sid=...'`` (``pivot``: the first ``-``)."""
    m = _CLI_FLAG.match(text, pivot + 1)
    if m is None or not _starts_word(text, pivot):
        return None
    name = m.group("name") or "cookie"
    kind = key_kind(name.replace("-", "_")) or "random"
    return _value_span(text, m.end(), kind, "=" if m.group("sep") == "=" else ":")


#: HAR (the browsers' network log, JSON): ``"value":`` of a ``{"name": "Cookie", ...}``
#: header or of an entry of a ``"cookies": [...]`` list; ``\"value\":`` in JSON text (JSON
#: nested deeper passes the assignment gate, whose handler sends ``value`` here).
_HAR_GATE = r'(?<=value":|alue\\":)(?=[ \t]{0,3}\\*")'
_HAR_NAME = re.compile(r'\\*"name\\*"[ \t]{0,3}:[ \t]{0,3}\\*"([A-Za-z-]{1,64})\\*"')
_HAR_COOKIES_AFTER = re.compile(r'\\*"[ \t]{0,3}:[ \t\r\n]{0,8}\[')  # after the word "cookies"
#: How far back a HAR entry's ``{`` and its list's ``"cookies": [`` are looked for.
_HAR_ENTRY_CHARS = 400
_HAR_LIST_CHARS = 4000


def _har_value(text: str, pivot: int) -> tuple[int, int] | None:
    """The value of a HAR cookie (``pivot``: the ``:`` after ``"value"``), when it is one."""
    entry = text.rfind("{", max(0, pivot - _HAR_ENTRY_CHARS), pivot)
    if entry < 0:
        return None
    name = _HAR_NAME.search(text, entry, pivot)
    if name is not None and name.group(1).lower() in ("cookie", "set-cookie"):
        return _value_span(text, pivot + 1, "cookies", ":")
    word = text.rfind("cookies", max(0, entry - _HAR_LIST_CHARS), entry)
    opening = _HAR_COOKIES_AFTER.match(text, word + 7, entry) if word >= 0 else None
    if opening is None or "]" in text[opening.end() : entry]:
        return None
    return _value_span(text, pivot + 1, "cookie", ":")


#: What must follow ``=``/``:`` of an assignment worth a closer look.
_VALUE_AHEAD = r"(?=[ \t]{0,3}(?:\\*[\"'`])?[^\s\"'`\\&,;<>(){}\[\]=])"


# -- the scanner ------------------------------------------------------------------------

_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ANSI_BEFORE = re.compile(r"(?:\x1b|\\u001[bB]|\\x1[bB]|\\033|\\e)\[[0-9;]{0,12}m\Z")


def _starts_word(text: str, i: int) -> bool:
    """Whether a secret may start at ``i``: not inside a word, escape sequences aside."""
    if i == 0:
        return True
    c = text[i - 1]
    if c not in _ALNUM:
        return True
    if i >= 2 and text[i - 2] == "\\" and c in "nrtbfv":
        return True
    if i >= 6 and text[i - 6] == "\\" and text[i - 5] in "uU" and all(h in _HEX for h in text[i - 4 : i]):
        return True
    if i >= 3 and text[i - 3] == "%" and c in _HEX and text[i - 2] in _HEX:
        return True
    return c == "m" and _ANSI_BEFORE.search(text, max(0, i - 20), i) is not None


Handler = Callable[[str, int], "tuple[int, int] | None"]

#: What must follow a pivot for the merged lookbehind gate of its detectors to be worth
#: testing (the shortest value of any of them).
PIVOT_AHEAD = {
    "-": r"[A-Za-z0-9_-]{16}",
    "_": r"[A-Za-z0-9_+/=-]{20}",
    ".": r"[A-Za-z0-9_-]{20}",
}


@dataclass(frozen=True)
class _Rule:
    """A compiled detector (``verify`` matched at the pivot) or an assignment handler."""

    name: str
    verify: re.Pattern[str] | None
    detector: Detector | None = None
    handler: Handler | None = None
    extend: re.Pattern[str] | None = None
    #: ``before`` when it is plain text: tested with ``str.startswith`` before ``verify``.
    literal: str | None = None


def _before_width(d: Detector) -> int:
    """The width of ``d.before`` (fixed, as lookbehinds require): the ``n`` for which
    ``(?<=before|.{n})`` compiles (Python accepts alternatives of one width only)."""
    for n in range(1, 65):
        try:
            re.compile(f"(?<=(?:{d.before})|[\\s\\S]{{{n}}})")
        except re.error:
            continue
        return n
    raise ValueError(f"detector {d.name!r}: 'before' must have a fixed width")


def _merged_lookbehinds(detectors: Iterable[Detector]) -> str:
    """``(?<=aa-|bb-)|(?<=ccc-)``: one lookbehind per width of the detectors' ``before``."""
    by_width: dict[int, list[str]] = {}
    for d in detectors:
        by_width.setdefault(_before_width(d), []).append(f"(?:{d.before}){re.escape(d.pivot)}")
    return "|".join(f"(?<={'|'.join(alts)})" for _, alts in sorted(by_width.items()))


#: Endings of the key names :func:`key_kind` knows, as long as needed to be rare in keys
#: that are not secrets ("description", "version" end like "authorization" in ``ion``).
_KEY_ENDINGS = ("key", "sig", "pwd", "pass", "auth", "oken", "cret", "sswd", "word", "gnature", "ntial",
                "ntials", "hrase", "ization", "ookie")  # fmt: skip


def _assignment_gate(pivot: str) -> str:
    """Right after ``=``/``:``: the key's last three letters are those of a secret's name
    (one test of three character classes, which most keys fail: "type", "content", "model",
    "id"), then the whole ending (literal alternatives, which the regex engine dismisses by
    their first character), and a value follows. Quotes and a blank may stand
    between key and separator. All of it runs inside the regex engine."""
    p = re.escape(pivot)
    third, second, last = (
        "".join(sorted({c for e in _KEY_ENDINGS for c in (e[i], e[i].upper())})) for i in (-3, -2, -1)
    )
    letters = f"[{third}][{second}][{last}]"
    tails = ("", "[\"'` ]", '(?:\\\\"|["\'`] )', '\\\\" ')
    widths = (0, 1, 2, 3)
    quick = "|".join(f"(?<={letters}{tail}{p})" for tail in tails)
    by_width: dict[int, list[str]] = {}
    for ending in _KEY_ENDINGS:
        for case in {ending, ending.capitalize(), ending.upper()}:
            for tail, width in zip(tails, widths):
                by_width.setdefault(len(ending) + width, []).append(f"{case}{tail}{p}")
    full = "|".join(f"(?<={'|'.join(alts)})" for _, alts in sorted(by_width.items()))
    # JSON nested twice or more (\\\" before the separator) is rare: each such key is read.
    nested = f'(?<=\\\\\\\\"{p})'
    # The key's test first: most separators of JSON text are followed by a value but
    # follow a key no secret has ("content":), and fail it at once.
    return f"(?:(?:{quick})(?:{full})|{nested}){_VALUE_AHEAD}"


#: The ``--password``-style flags (``pivot``: the first ``-``).
_CLI_GATE = (
    r"(?:(?<![A-Za-z0-9-]-)|(?<=[ntrm0-9a-fA-F]-))"
    r"(?=-(?:pass|token|api-?key|secret|client-secret|access-token|auth-token|cookie)"
    r"|b[ \t]+\\*[\"'A-Za-z0-9_.])"
)


class _Scanner:
    """The compiled detectors: one candidate pattern per pivot character, and the rules
    that decide on each candidate."""

    def __init__(self, detectors: Iterable[Detector]) -> None:
        # Per pivot, the gates in order, each with the rules it can let through (a gate is a
        # named group, so a candidate is decided by its own gate's rules only).
        gates: dict[str, list[tuple[str, list[_Rule]]]] = {}
        merged: dict[str, list[tuple[Detector, _Rule]]] = {}
        for d in detectors:
            pivot = re.escape(d.pivot)
            lookbehind = f"(?<=(?P<b>{d.before}))" if d.before else ""
            verify = f"{lookbehind}{pivot}(?:{d.after})"
            if d.secret:
                verify = verify.replace(f"(?P<{d.secret}>", "(?P<s>")
            extend = re.compile(f"[{d.extend}]{{0,8}}\\Z") if d.extend else None
            literal = d.before if d.before and re.escape(d.before) == d.before else None
            rule = _Rule(d.name, re.compile(verify), d, extend=extend, literal=literal)
            if d.gate is None and d.before:
                merged.setdefault(d.pivot, []).append((d, rule))
            else:
                gates.setdefault(d.pivot, []).append((d.gate or f"(?={d.after})", [rule]))
        for pivot, group in merged.items():
            gate = f"(?={PIVOT_AHEAD[pivot]})(?:{_merged_lookbehinds(d for d, _ in group)})"
            gates.setdefault(pivot, []).insert(0, (gate, [rule for _, rule in group]))
        for pivot in ("=", ":"):
            gates.setdefault(pivot, []).append(
                (_assignment_gate(pivot), [_Rule("assignment", None, handler=_assignment)])
            )
        # After the assignment gate: JSON nested twice or more (``\\\\"value\\\\":``) passes
        # that one, whose handler sends ``value`` keys to :func:`_har_value`.
        gates[":"].append((_HAR_GATE, [_Rule("har-cookie", None, handler=_har_value)]))
        gates["-"].append((_CLI_GATE, [_Rule("cli-flag", None, handler=_cli_flag)]))
        self.rules: dict[str, list[_Rule]] = {}
        self.patterns: list[tuple[str, re.Pattern[str]]] = []
        for pivot, alternatives in gates.items():
            names = []
            for gate, rules in alternatives:
                name = f"g{len(self.rules)}"
                self.rules[name] = rules
                names.append(f"(?P<{name}>{gate})")
            self.patterns.append((pivot, re.compile(re.escape(pivot) + "(?:" + "|".join(names) + ")")))

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, detector)`` of every secret in ``text``, in no particular order."""
        found: list[tuple[int, int, str]] = []
        for pivot, pattern in self.patterns:
            if pivot not in text:
                continue
            covered = -1
            for m in pattern.finditer(text):
                at = m.start()
                if at < covered:
                    continue  # inside a secret this pivot found already
                for rule in self.rules[m.lastgroup or ""]:
                    span = self._decide(rule, text, at)
                    if span is not None:
                        found.append(span)
                        covered = span[1]
                        break
        for start, end, name in list(found):
            if name == "aws-access-key-id":
                found.extend(_aws_secret_near(text, start, end))
        return found

    @staticmethod
    def _decide(rule: _Rule, text: str, at: int) -> tuple[int, int, str] | None:
        """The secret ``rule`` finds with its pivot at ``at``, if any."""
        if rule.handler is not None:
            value = rule.handler(text, at)
            return None if value is None else (value[0], value[1], rule.name)
        assert rule.verify is not None and rule.detector is not None
        if rule.literal is not None and not text.startswith(rule.literal, at - len(rule.literal)):
            return None
        m = rule.verify.match(text, at)
        if m is None:
            return None
        d = rule.detector
        if d.secret:
            start, end = m.start("s"), m.end("s")
            if d.check is not None and not d.check(text[start:end]):
                return None
            return start, end, d.name
        end = m.end()
        for start in _starts(rule, text, m.start("b") if d.before else at):
            if d.boundary and not _starts_word(text, start):
                continue
            if d.check is None or d.check(text[start:end]):
                return start, end, d.name
        return None


def _starts(rule: _Rule, text: str, start: int) -> list[int]:
    """Where a match may start: at ``start``, or (nearest first) further left over the
    rule's ``extend`` characters."""
    if rule.extend is None:
        return [start]
    ext = rule.extend.search(text, max(0, start - 8), start)
    return list(range(start, (ext.start() if ext else start) - 1, -1))


_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40}(?![A-Za-z0-9+/=])")


def _aws_secret_near(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """An AWS secret access key (40 base64 characters, no prefix) written near its key id."""
    out = []
    for m in _AWS_SECRET.finditer(text, max(0, start - 300), min(len(text), end + 300)):
        if _aws_secret(m.group()):
            out.append((m.start(), m.end(), "aws-secret-access-key"))
    return out


_SCANNER = _Scanner(DETECTORS)


def _merge(spans: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end, _ in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _escape_safe(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink a span so that it neither takes the backslash of an escape whose character
    follows it nor starts with a character a backslash escapes (redacted JSON text stays
    valid JSON)."""
    run = 0
    while end - run > start and text[end - run - 1] == "\\":
        run += 1
    if run % 2:
        end -= 1
    run = 0
    while start - run > 0 and text[start - run - 1] == "\\":
        run += 1
    if run % 2:
        start += 1
    return start, end


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Every secret in ``text`` as ``(start, end, detector name)``, sorted by position
    (overlapping findings of several detectors are all listed)."""
    if len(text) < MIN_SECRET_CHARS:
        return []
    return sorted(_SCANNER.spans(text))


def _apply(text: str, spans: list[tuple[int, int, str]]) -> str:
    out = []
    last = 0
    for start, end in _merge(spans):
        start, end = _escape_safe(text, start, end)
        if end <= start or start < last:
            continue
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


# -- the cache of scanned texts ---------------------------------------------------------

#: Texts at least this long are remembered once scanned (an agent's system prompt, tool
#: definitions and earlier turns come back on every call).
CACHE_MIN_CHARS = 24
#: Characters of text the cache keeps at most (oldest entries are dropped beyond; each
#: entry also counts :data:`_ENTRY_COST` for its bookkeeping).
CACHE_MAX_CHARS = 8_000_000
_ENTRY_COST = 64


class _Cache:
    """Scanned texts and their redacted forms (``None``: nothing to redact).

    Keyed by the text itself, so a hit is exact (an equal string always redacts the same
    way); a string object seen again hashes in O(1) (CPython caches a str's hash). Readers
    look ``data`` up without the lock (``data.get(text, _UNSEEN)``: one dict operation);
    writers go through :meth:`put`.
    """

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        # Ordered: dropping the oldest is O(1). A dict's first key, after many deletions at
        # its front, is found by skipping their holes: 2.6 µs per eviction at 4,096 entries,
        # 19 µs at 50,000 (measured), paid by every new text once the cache is full.
        self.data: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, text: str, redacted: str | None) -> None:
        with self._lock:
            if text in self.data:
                return
            self.data[text] = redacted
            self.chars += len(text) + _ENTRY_COST
            while self.chars > self.max_chars and self.data:
                oldest, _ = self.data.popitem(last=False)
                self.chars -= len(oldest) + _ENTRY_COST

    def clear(self) -> None:
        with self._lock:
            self.data.clear()
            self.chars = 0


_CACHE = _Cache(CACHE_MAX_CHARS)

#: How many short texts :data:`_CLEAN_SHORT` holds before it is emptied.
CLEAN_SHORT_MAX = 65_536
#: Short texts (under :data:`CACHE_MIN_CHARS`) scanned and found clean. A body's keys and
#: short values ("content", "assistant", "function", "finish_reason") come back on every
#: call, and a set lookup costs less than scanning them again. Kept apart from the cache of
#: scanned texts: no redacted form, no size accounting, no lock (one set operation each);
#: emptied when full (short texts mostly either recur on every call or never).
_CLEAN_SHORT: set[str] = set()


def _remember_clean_short(text: str) -> None:
    if len(_CLEAN_SHORT) >= CLEAN_SHORT_MAX:
        _CLEAN_SHORT.clear()
    _CLEAN_SHORT.add(text)


def clear_cache() -> None:
    """Forget every scanned text (for benchmarks and tests)."""
    _CACHE.clear()
    _CLEAN_SHORT.clear()
    _CLEAN_KEYS.clear()
    _CLEAN_PIECES.clear()


def redact_text(text: str, *, remember: bool = True) -> str:
    """``text`` with every secret replaced by :data:`REDACTED` (the same object when there
    is none). Works on plain text and on JSON text alike: the result of redacting valid
    JSON is valid JSON. ``remember=False`` for a text that will not come back (a model's
    answer as JSON text, with its id): it is neither looked up nor kept in the cache of
    scanned texts, whose room is for what recurs (system prompts, earlier turns)."""
    n = len(text)
    if n < MIN_SECRET_CHARS:
        return text
    if n < CACHE_MIN_CHARS:
        if remember and text in _CLEAN_SHORT:
            return text
        spans = _SCANNER.spans(text)
        if not spans:
            if remember:
                _remember_clean_short(text)
            return text
        return _apply(text, spans)
    if remember:
        cached = _CACHE.data.get(text, _UNSEEN)
        if cached is not _UNSEEN:
            return text if cached is None else cached
    spans = _SCANNER.spans(text)
    result = _apply(text, spans) if spans else text
    if remember:
        _CACHE.put(text, None if result is text else result)
    return result


# -- ids --------------------------------------------------------------------------------

#: How a secret inside an id is written: a fingerprint of it, the same for the same secret.
ID_SECRET_PREFIX = "secret-"
_FINGERPRINT = re.compile(re.escape(ID_SECRET_PREFIX) + "[0-9a-f]{16}")
_IDS: dict[str, str] = {}
_IDS_MAX = 4096


def redact_id(value: str) -> str:
    """An entity, session or process id with every secret in it replaced by a fingerprint
    (``user-ghp_…`` → ``user-secret-1f0c…``): the first 16 hex digits of the secret's
    SHA-256. The same id always maps to the same one, so an app keeps addressing its
    entity with the id it has, and two users' different tokens stay two entities (a plain
    ``[REDACTED]`` would merge them); the secret is never stored. Ids are redacted, not
    refused: an id reaches memtap from headers and agents too, where refusing would fail
    the user's call. Returns ``value`` itself when it holds no secret (the common case:
    one cache lookup)."""
    if len(value) < MIN_SECRET_CHARS or redact_text(value) is value:
        return value
    known = _IDS.get(value)
    if known is not None:
        return known
    out = []
    last = 0
    for start, end in _merge(_SCANNER.spans(value)):
        if start < last or _FINGERPRINT.fullmatch(value, start, end):
            continue  # a fingerprint already (an id read back from the store)
        digest = hashlib.sha256(value[start:end].encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out.append(value[last:start])
        out.append(ID_SECRET_PREFIX + digest)
        last = end
    out.append(value[last:])
    safe = "".join(out)
    if len(_IDS) >= _IDS_MAX:
        _IDS.clear()
    _IDS[value] = safe
    return safe


def redact_optional_id(value: str | None) -> str | None:
    """:func:`redact_id` of an id that may be absent (an attrs converter)."""
    return None if value is None else redact_id(value)


install_id_filter(redact_id)  # ids given to the data model are redacted from now on


# -- structures -------------------------------------------------------------------------

_SEPARATOR = "\x00"
_JSON_SCALARS = (int, float, bool, type(None))
_CONTAINERS = frozenset((dict, list, tuple))
_SCALAR_TYPES = frozenset(_JSON_SCALARS)
#: Not in the cache of scanned texts (``None`` there means: scanned, nothing to redact).
_UNSEEN: Any = object()


_KINDS: dict[str, str | None] = {}


def _key_kind_cached(key: str) -> str | None:
    """:func:`key_kind`, remembered (the keys of request bodies repeat on every call)."""
    try:
        return _KINDS[key]
    except KeyError:
        kind = key_kind(key) if len(key) <= 64 else None
        if len(_KINDS) < 10_000:
            _KINDS[key] = kind
        return kind


def redact_json(obj: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """A JSON-like structure (dicts, lists, strings, numbers) with every secret replaced:
    secrets inside strings (values and keys), and whole values of secret-named keys
    (``{"password": "hunter2"}``). Objects that are not JSON types are first converted by
    ``default`` (as :func:`json.dumps` would; ``str`` when ``None``). Returns ``obj`` itself
    when there is nothing to redact, else a copy where only the changed branches are new.

    Every string not already known is scanned in one pass (joined), so a body of many
    small strings costs one scan, and long strings seen before (:data:`CACHE_MIN_CHARS`)
    are not scanned again.
    """
    return _redact_json(obj, default)[0]


#: :func:`_collect`'s findings: a value that must go or be converted, a long string.
_FLAGGED = 1
_LONG = 2


def _redact_json(obj: Any, default: Callable[[Any], Any] | None) -> tuple[Any, int]:
    """:func:`redact_json`, and what :func:`_collect` found (``_FLAGGED``, ``_LONG``)."""
    convert = default or str
    pending: dict[str, None] = {}
    found = _collect(obj, pending, convert)
    results: dict[str, str] = {}
    if pending:
        _scan_many(list(pending), results)
    if not results and not found & _FLAGGED:
        return obj, found
    return _rebuild(obj, results, convert), found


def new_text(obj: Any, enough: int, *, max_nodes: int = 512) -> int:
    """How many characters of ``obj``'s strings redaction and encoding have not seen yet,
    counted until ``enough`` (a bound, not a total: it stops there, and after ``max_nodes``
    values it answers ``enough``)."""
    stack = [obj]
    seen = 0
    nodes = 0
    cached = _CACHE.data
    while stack:
        item = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return enough
        kind = type(item)
        if kind is str or (kind not in _CONTAINERS and isinstance(item, str)):
            n = len(item)
            if n < MIN_SECRET_CHARS:
                continue
            known = item in cached if n >= CACHE_MIN_CHARS else item in _CLEAN_SHORT
            if not known or (n >= ENCODE_CACHE_MIN_CHARS and item not in _ENCODED):
                seen += n
            if seen >= enough:
                return seen
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind in _SCALAR_TYPES:
            continue
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return seen


def _collect(obj: Any, pending: dict[str, None], convert: Callable[[Any], Any]) -> int:
    """Gather the strings of ``obj`` to scan; the result has ``_FLAGGED`` if a secret-named
    key holds a value that must go (or a non-JSON object must be converted), ``_LONG`` if
    a string is long enough for :func:`dumps_redacted` to keep its encoding.

    Dicts, lists and strings are told apart by their exact type first: this walk runs on
    every request body, and an ``isinstance`` test against ``Mapping`` (an abstract class)
    costs several times a type comparison."""
    kind = type(obj)
    if kind is str:
        return _collect_text(obj, pending)
    if kind is dict:
        return _collect_items(obj, pending, convert)
    if kind is list or kind is tuple:
        return _collect_all(obj, pending, convert)
    if kind in _SCALAR_TYPES:
        return 0
    if isinstance(obj, str):
        return _collect_text(obj, pending)
    if isinstance(obj, Mapping):
        return _collect_items(obj, pending, convert)
    if isinstance(obj, (list, tuple)):
        return _collect_all(obj, pending, convert)
    return 0 if isinstance(obj, _JSON_SCALARS) else _FLAGGED  # any other object is converted


def _collect_all(items: Iterable[Any], pending: dict[str, None], convert: Callable[[Any], Any]) -> int:
    """:func:`_collect` of a list or tuple's items."""
    found = 0
    for item in items:
        kind = type(item)
        if kind is str:
            found |= _collect_text(item, pending)
        elif kind not in _SCALAR_TYPES:
            found |= _collect(item, pending, convert)
    return found


def _collect_text(text: str, pending: dict[str, None]) -> int:
    """:func:`_collect` of one string."""
    n = len(text)
    found = _LONG if n >= ENCODE_CACHE_MIN_CHARS else 0
    if n >= MIN_SECRET_CHARS and text not in pending:
        if n < CACHE_MIN_CHARS:
            if text not in _CLEAN_SHORT:
                pending[text] = None
        else:
            cached = _CACHE.data.get(text, _UNSEEN)
            if cached is _UNSEEN:
                pending[text] = None
            elif cached is not None:
                return found | _FLAGGED
    return found


def _collect_items(obj: Mapping[Any, Any], pending: dict[str, None], convert: Callable[[Any], Any]) -> int:
    """:func:`_collect` of a mapping: its keys, its values, and the values of secret-named
    keys. A key found clean before costs one lookup (:data:`_CLEAN_KEYS`), and so does a
    short value known clean: the keys and short values of bodies and answers repeat."""
    found = 0
    keys = _CLEAN_KEYS
    for key, value in obj.items():
        kind = keys.get(key, _UNSEEN)
        if kind is _UNSEEN:
            kind = _new_key(key, pending) if isinstance(key, str) else None
            if kind is _FLAGGED_KEY:
                found |= _FLAGGED
                kind = _key_kind_cached(key)
        value_kind = type(value)
        if kind is not None and isinstance(value, str) and is_secret_value(kind, value):
            found |= _FLAGGED
        elif value_kind is str:
            n = len(value)
            if n >= MIN_SECRET_CHARS and not (n < CACHE_MIN_CHARS and value in _CLEAN_SHORT):
                found |= _collect_text(value, pending)
        elif value_kind is dict:
            found |= _collect_items(value, pending, convert)
        elif value_kind not in _SCALAR_TYPES:
            found |= _collect(value, pending, convert)
    return found


#: Keys found clean (scanned, or too short to hold a secret), with their
#: :func:`key_kind`: the keys of request bodies and answers repeat on every call. Bounded:
#: past :data:`_CLEAN_KEYS_MAX` new keys are not remembered (they are still checked).
_CLEAN_KEYS: dict[str, str | None] = {}
_CLEAN_KEYS_MAX = 10_000
#: :func:`_new_key`'s answer for a key that holds a secret itself.
_FLAGGED_KEY: Any = object()


def _new_key(key: str, pending: dict[str, None]) -> Any:
    """A key not known clean: gathered to be scanned when long enough (as any string),
    remembered in :data:`_CLEAN_KEYS` once known clean. Returns its kind, or
    :data:`_FLAGGED_KEY` when the key itself is a known secret."""
    n = len(key)
    if n >= MIN_SECRET_CHARS and _collect_text(key, pending) & _FLAGGED:
        return _FLAGGED_KEY
    kind = _key_kind_cached(key)
    if n < MIN_SECRET_CHARS:
        known = True
    elif n < CACHE_MIN_CHARS:
        known = key in _CLEAN_SHORT
    else:
        known = _CACHE.data.get(key, _UNSEEN) is None
    if known and len(_CLEAN_KEYS) < _CLEAN_KEYS_MAX:
        _CLEAN_KEYS[key] = kind
    return kind


def _spans_each(texts: list[str]) -> dict[int, list[tuple[int, int, str]]]:
    """The secrets of each of ``texts`` alone (offsets in it), by index: one scan of them
    joined by a separator no secret crosses."""
    spans = _SCANNER.spans(_SEPARATOR.join(texts))
    hits: dict[int, list[tuple[int, int, str]]] = {}
    if not spans:
        return hits
    starts = []
    offset = 0
    for t in texts:
        starts.append(offset)
        offset += len(t) + 1
    for start, end, name in spans:
        i = bisect.bisect_right(starts, start) - 1
        base = starts[i]
        hits.setdefault(i, []).append((start - base, min(end, base + len(texts[i])) - base, name))
    return hits


def _scan_many(texts: list[str], results: dict[str, str]) -> None:
    """Scan ``texts`` as one joined text; record those that change in ``results``."""
    hits = _spans_each(texts)
    for i, t in enumerate(texts):
        found = hits.get(i)
        redacted = _apply(t, found) if found else None
        if redacted is not None:
            results[t] = redacted
        if len(t) >= CACHE_MIN_CHARS:
            _CACHE.put(t, redacted)
        elif redacted is None:
            _remember_clean_short(t)


def _scanned(text: str, results: dict[str, str]) -> str:
    """``text`` redacted, once the strings :func:`_collect` gathered are scanned
    (:func:`_scan_many`): changed in ``results``, else unchanged when short (each short one
    was scanned, or is known clean: :data:`_CLEAN_SHORT`), else from the cache (scanned
    again if dropped from it since)."""
    found = results.get(text)
    if found is not None:
        return found
    return redact_text(text) if len(text) >= CACHE_MIN_CHARS else text


def _rebuild(obj: Any, results: dict[str, str], convert: Callable[[Any], Any]) -> Any:
    if isinstance(obj, str):
        return _scanned(obj, results)
    if isinstance(obj, Mapping):
        changed = not isinstance(obj, dict)
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            new_key = _rebuild(key, results, convert) if isinstance(key, str) else key
            if isinstance(key, str) and isinstance(value, str):
                kind = _key_kind_cached(key)
                if kind is not None and is_secret_value(kind, value):
                    out[new_key] = REDACTED
                    changed = True
                    continue
            new_value = _rebuild(value, results, convert)
            changed = changed or new_key is not key or new_value is not value
            out[new_key] = new_value
        return out if changed else obj
    if isinstance(obj, (list, tuple)):
        items = [_rebuild(item, results, convert) for item in obj]
        if isinstance(obj, list) and all(a is b for a, b in zip(items, obj)):
            return obj
        return items
    if isinstance(obj, _JSON_SCALARS):
        return obj
    converted = convert(obj)
    if isinstance(converted, str):
        return redact_text(converted)
    return redact_json(converted, convert)


# -- streams ----------------------------------------------------------------------------


class _CleanPieces:
    """The groups of stream pieces (the strings at one place of successive events, in
    order) found to hold no secret, remembered by their exact pieces: every event of a
    stream repeats its model, object type and fingerprint, and every stream of a client the
    same ones, so that their scans (the pieces joined, and each alone) are made once. Keyed
    by the pieces themselves, not their join: the same text cut elsewhere is scanned anew
    (a cut decides what the scan of each piece alone sees). Bounded (oldest forgotten)."""

    def __init__(self, max_groups: int) -> None:
        self.max_groups = max_groups
        self._groups: OrderedDict[tuple[str, ...], None] = OrderedDict()  # see _Cache.data
        self._lock = threading.Lock()

    def __contains__(self, pieces: tuple[str, ...]) -> bool:
        return pieces in self._groups

    def add(self, pieces: tuple[str, ...]) -> None:
        if sum(map(len, pieces)) > _CLEAN_PIECES_MAX_CHARS:
            return  # long answers do not come back: not worth the room
        with self._lock:
            self._groups[pieces] = None
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._groups.clear()


#: The longest group of stream pieces remembered as clean (an answer's text rarely comes
#: back cut the same way; a model name, an id or a fingerprint do).
_CLEAN_PIECES_MAX_CHARS = 1024
_CLEAN_PIECES = _CleanPieces(4096)


def redact_stream(events: Sequence[str]) -> list[str]:
    """A stream's events (JSON texts, in order) with every secret removed, including one the
    stream cut across several events (:func:`redact_stream_events`). Events that change are
    encoded again; the others are returned as they were. A text that is not a JSON object
    or array is redacted on its own."""
    decoded: list[Any] = []
    for event in events:
        try:
            obj = json.loads(event)
        except ValueError:
            obj = None
        decoded.append(obj if type(obj) is dict or type(obj) is list else event)
    redacted = redact_stream_events(decoded)
    return [
        event if new is old else (new if type(new) is str else compact_encoder().encode(new))
        for event, old, new in zip(events, decoded, redacted)
    ]


def redact_stream_events(events: Sequence[Any], default: Callable[[Any], Any] | None = None) -> list[Any]:
    """A stream's decoded events (dicts or lists, in order) with every secret removed,
    including one the stream cut across several events: the strings found at the same place
    of successive events (``choices.0.delta.content``, ``delta.partial_json``...) are joined
    and scanned as one text, and each event keeps its part of the result.

    ``events`` are not changed: an event that holds a secret comes back as a redacted copy,
    the others as they are (an SDK's events are read again by the capture writer). An event
    that is a string is redacted as text; one holding objects that are not JSON types is
    first converted as :func:`json.dumps` with ``default`` would (``str`` when ``None``)."""
    objs = list(events)
    groups = _stream_texts(objs)
    if groups is None:  # rare: objects that are not JSON types, converted as the encoder will
        for index, event in enumerate(objs):
            if _stream_texts([event]) is None:
                objs[index] = json.loads(compact_encoder(default or str).encode(event))
        groups = _stream_texts(objs)
        assert groups is not None
    found = _stream_findings(groups)
    if found:
        # Rare: cut the secrets out of copies (their strings are gathered again, with the
        # places they are at).
        copies = [copy.deepcopy(e) for e in objs]
        copied = _stream_pieces(copies)
        changed: set[int] = set()
        for path, spans in found:
            _cut(copied[path], spans, copies, changed)
        objs = [copies[i] if i in changed else e for i, e in enumerate(objs)]
    return [redact_text(e) if type(e) is str else e for e in objs]


def _stream_texts(events: Sequence[Any]) -> dict[tuple[Any, ...], list[str]] | None:
    """The strings of ``events`` (decoded JSON; strings and numbers among them are left
    out) grouped by their place in an event, in order; ``None`` when an event is or holds an
    object that is not a JSON type. Gathered in a tree shaped like the events (a place's
    path is made once per place, not once per string: this runs on every stream)."""
    tree: dict[Any, list[Any]] = {}
    for obj in events:
        kind = type(obj)
        if kind is dict or kind is list:
            if not _event_texts(obj, tree):
                return None
        elif kind is not str and kind not in _SCALAR_TYPES:
            return None
    groups: dict[tuple[Any, ...], list[str]] = {}
    _flatten(tree, (), groups)
    return groups


def _event_texts(obj: Any, tree: dict[Any, list[Any]]) -> bool:
    """Add the strings of one event's dict or list to ``tree`` (``key -> [strings, subtree]``);
    ``False`` at an object that is not a JSON type."""
    for k, v in obj.items() if type(obj) is dict else enumerate(obj):
        kind = type(v)
        if kind is str:
            node = tree.get(k)
            if node is None:
                tree[k] = [[v], None]
            else:
                node[0].append(v)
        elif kind is dict or kind is list:
            node = tree.get(k)
            if node is None:
                tree[k] = node = [[], {}]
            elif node[1] is None:
                node[1] = {}
            if not _event_texts(v, node[1]):
                return False
        elif kind not in _SCALAR_TYPES:
            return False
    return True


def _flatten(
    tree: dict[Any, list[Any]], path: tuple[Any, ...], groups: dict[tuple[Any, ...], list[str]]
) -> None:
    for key, (texts, subtree) in tree.items():
        if texts:
            groups[(*path, key)] = texts
        if subtree:
            _flatten(subtree, (*path, key), groups)


def _stream_pieces(events: Sequence[Any]) -> dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]]:
    """The strings of ``events`` (decoded JSON, as :func:`redact_stream_events` has made
    them) as :func:`_stream_texts` groups them, each with where it is: ``(event index,
    parent, key, text)`` (to cut a secret out)."""
    pieces: dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]] = {}
    for index, obj in enumerate(events):
        kind = type(obj)
        if kind is dict or kind is list:
            _stream_leaves(obj, (), index, pieces)
    return pieces


def _stream_findings(
    groups: dict[tuple[Any, ...], list[str]],
) -> list[tuple[tuple[Any, ...], list[tuple[int, int]]]]:
    """Where secrets are among a stream's strings (``groups``: by place, in order): per
    place, the spans (offsets in its strings joined). Each place's strings are scanned
    joined (a secret the stream cut) and each alone (joining may glue a word to a key's
    start; a string that recurs, an id in every event, alone once), all of them in one scan.
    """
    texts: list[str] = []
    plan: list[tuple[tuple[Any, ...], tuple[str, ...], int, dict[str, int] | None]] = []
    for path, group in groups.items():
        pieces = tuple(group)
        if pieces in _CLEAN_PIECES:
            continue
        joined = "".join(pieces)
        if len(joined) < MIN_SECRET_CHARS:
            continue
        at = len(texts)
        texts.append(joined)
        alone: dict[str, int] | None = None
        if len(pieces) > 1:
            alone = {}
            for piece in pieces:
                if len(piece) >= MIN_SECRET_CHARS and piece not in alone:
                    alone[piece] = len(texts)
                    texts.append(piece)
        plan.append((path, pieces, at, alone))
    if not texts:
        return []
    hits = _spans_each(texts)
    found_at = []
    for path, pieces, at, alone in plan:
        found = list(hits.get(at, ()))
        if alone:
            offset = 0
            for piece in pieces:
                index = alone.get(piece)
                if index is not None and index in hits:
                    found += [(a + offset, b + offset, name) for a, b, name in hits[index]]
                offset += len(piece)
        if found:
            found_at.append((path, _merge(found)))
        else:
            _CLEAN_PIECES.add(pieces)
    return found_at


def _stream_leaves(
    obj: Any,
    path: tuple[Any, ...],
    index: int,
    pieces: dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]],
) -> None:
    """Add the strings of ``obj`` (an event's dict or list, at ``path``) to ``pieces``, by
    their path. The values of decoded JSON are exactly str, dict, list or a scalar (numbers,
    true, null are no secret's place and are passed over without a path being made for
    them)."""
    for k, v in obj.items() if type(obj) is dict else enumerate(obj):
        kind = type(v)
        if kind is str:
            at = (*path, k)
            group = pieces.get(at)
            if group is None:
                pieces[at] = [(index, obj, k, v)]
            else:
                group.append((index, obj, k, v))
        elif kind is dict or kind is list:
            _stream_leaves(v, (*path, k), index, pieces)


def _cut(
    group: list[tuple[int, Any, Any, str]],
    spans: list[tuple[int, int]],
    decoded: list[Any],
    changed: set[int],
) -> None:
    """Remove ``spans`` (offsets in the joined pieces) from the pieces: the piece where a
    span starts gets :data:`REDACTED`, the rest of the span is dropped."""
    offset = 0
    for index, parent, key, text in group:
        start, end = offset, offset + len(text)
        offset = end
        parts = []
        last = start
        for a, b in spans:
            if b <= start or a >= end:
                continue
            parts.append(text[last - start : max(a, start) - start])
            if a >= start:
                parts.append(REDACTED)
            last = min(b, end)
        if not parts:
            continue
        parts.append(text[last - start :])
        parent[key] = "".join(parts)
        changed.add(index)


# -- URLs -------------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """``url`` for display: the password of its user info and the values of secret query
    parameters (``password=``, ``token=``, ``sslpassword=``...) replaced by :data:`URL_MASK`.
    A URL that cannot be parsed keeps only its scheme."""
    try:
        parts = urlsplit(url)
        password = parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        scheme = url.split(":", 1)[0] if ":" in url else ""
        return f"{scheme}://{URL_MASK}" if scheme.isalnum() else URL_MASK
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{URL_MASK}@{hostport}"
    secret_params = [key for key, value in query if value and key_kind(key) is not None]
    if password is None and not secret_params:
        return url
    new_query = parts.query
    if secret_params:
        masked = [(k, URL_MASK if v and key_kind(k) is not None else v) for k, v in query]
        new_query = urlencode(masked, quote_via=quote, safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=new_query))


# -- logging ----------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """A logging filter removing secrets from a record's message and traceback (the record
    is changed in place, so every handler sees the redacted text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record``; always lets it through."""
        try:
            message = record.getMessage()
        except Exception:
            return True
        redacted = redact_text(message)
        if redacted is not message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_text(text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_FILTER = RedactingFilter()


def guard_loggers(prefix: str = "memtap") -> None:
    """Attach the redacting filter to every logger named ``prefix`` or ``prefix.*`` that
    exists now (once each). A filter runs where a record is made, so every handler,
    wherever it is attached, sees the redacted record."""
    names = [n for n in list(logging.root.manager.loggerDict) if n == prefix or n.startswith(prefix + ".")]
    for name in [prefix, *names]:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


#: Strings at least this long are encoded once and their JSON kept (see :func:`dumps_redacted`).
ENCODE_CACHE_MIN_CHARS = 1024
_NONCE = os.urandom(6).hex()


class _Encoded:
    """The UTF-8 JSON encoding of long (redacted) strings, bounded by bytes (oldest first)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._data: OrderedDict[str, bytes] = OrderedDict()  # see _Cache.data
        self._lock = threading.Lock()

    def __contains__(self, text: str) -> bool:
        return text in self._data

    def get(self, text: str) -> bytes:
        try:
            return self._data[text]
        except KeyError:
            pass
        data = json.dumps(text, ensure_ascii=False).encode()
        with self._lock:
            if text not in self._data:
                self._data[text] = data
                self.size += len(data)
                while self.size > self.max_bytes and self._data:
                    self.size -= len(self._data.popitem(last=False)[1])
        return data


_ENCODED = _Encoded(32_000_000)


class _CompactEncoder(json.JSONEncoder):
    """:class:`json.JSONEncoder` of compact UTF-8 text whose :meth:`encode` reuses one C
    encoder for dicts and lists: ``JSONEncoder.encode`` makes a new one for each (half the
    cost of encoding a small request body). That one is made without the circular-reference
    check, which needs state per call: what memtap encodes is JSON data (a request body the
    SDK has encoded already, a record); a structure that holds itself ends in a
    ``RecursionError`` instead of a ``ValueError``."""

    def __init__(self, default: Callable[[Any], Any] | None) -> None:
        super().__init__(ensure_ascii=False, separators=(",", ":"), default=default)
        make = getattr(json.encoder, "c_make_encoder", None)
        strings = getattr(json.encoder, "c_encode_basestring", None)
        # c_make_encoder(markers, default, encoder, indent, key_separator, item_separator,
        #                sort_keys, skipkeys, allow_nan): what JSONEncoder.iterencode passes.
        self._containers = (
            make(None, self.default, strings, None, ":", ",", False, False, True)
            if make is not None and strings is not None
            else None
        )

    def encode(self, o: Any) -> str:
        """``o`` as compact JSON text."""
        kind = type(o)
        if self._containers is not None and (kind is dict or kind is list):
            return "".join(self._containers(o, 0))
        return super().encode(o)


@functools.lru_cache(maxsize=16)
def compact_encoder(default: Callable[[Any], Any] | None = None) -> json.JSONEncoder:
    """The JSON encoder of compact UTF-8 text (``json.dumps(obj, ensure_ascii=False,
    separators=(",", ":"), default=default)``), made once per ``default``: ``json.dumps``
    with options builds a new encoder on every call, a cost as large as encoding a small
    request body. Encoding with it is thread-safe (each call has its own state)."""
    return _CompactEncoder(default)


def _pydantic_encoder() -> Callable[..., bytes] | None:
    """pydantic-core's JSON encoder (Rust), when it is installed (imported at the first
    encoding, not by ``import memtap``).

    It writes the small structures of a call (a record of the spool, a stream's events)
    4-8 times faster than the standard library's, whose C encoder makes a string per token.
    It is installed with every SDK memtap taps (openai, anthropic, google-genai and litellm
    build on pydantic), but it is not a dependency of memtap-core: without it (the proxy
    alone) the standard library writes the same data (numbers may be spelt otherwise:
    ``1.5e-7``, ``1.5e-07``; strings are written byte for byte alike)."""
    try:
        from pydantic_core import to_json
    except ImportError:
        return None
    return to_json


_UNRESOLVED: Any = object()
#: :func:`_pydantic_encoder`'s answer, once asked (``None``: not installed).
_fast_to_json: Any = _UNRESOLVED


def encode_json(obj: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact UTF-8 JSON of ``obj``: ``compact_encoder(default).encode(obj).encode()``,
    written by pydantic-core's faster encoder when it is installed. For JSON data (dicts,
    lists, strings, numbers, booleans, ``None``, as :func:`redact_json` returns them), both
    write what decodes to the same data; other objects go to ``default`` with the standard
    library, while pydantic-core writes those it knows (a datetime, a model) itself. Falls
    back to the standard library whenever pydantic-core cannot encode ``obj`` (nesting
    deeper than it goes, a string UTF-8 cannot hold: then the standard library raises)."""
    global _fast_to_json
    fast = _fast_to_json
    if fast is _UNRESOLVED:
        fast = _fast_to_json = _pydantic_encoder()
    if fast is not None:
        try:
            data: bytes = fast(obj, fallback=default or str)
            return data
        except Exception:  # e.g. a string it cannot write: the standard library decides
            pass
    return compact_encoder(default).encode(obj).encode()


def dumps_redacted(obj: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact UTF-8 JSON of ``obj`` with every secret replaced (:func:`redact_json`).

    Long strings (an agent's system prompt, earlier turns) come back on every call: their
    JSON encoding is kept, and each call encodes only the rest (the long strings are swapped
    for placeholders that cannot occur in text, the rest is encoded, and the kept encodings
    are joined in), so a 70 KB body costs about a copy of it.
    """
    redacted, found = _redact_json(obj, default)
    return _encode_keeping_long(redacted, found, default)


def dumps_redacted_record(
    fields: Mapping[str, Any], parts: Mapping[str, Any], default: Callable[[Any], Any] | None = None
) -> bytes:
    """Compact UTF-8 JSON of one object: ``fields`` as they are (values the caller made or
    redacted itself), then ``parts`` redacted as :func:`dumps_redacted` redacts one value
    (all of their strings gathered and scanned at once, and encoded in one piece)."""
    names = list(parts)
    redacted, found = _redact_json([parts[name] for name in names], default)
    record = dict(fields)
    record.update(zip(names, redacted))
    return _encode_keeping_long(record, found, default)


def _encode_keeping_long(obj: Any, found: int, default: Callable[[Any], Any] | None) -> bytes:
    """:func:`encode_json` of ``obj`` (redacted, with :func:`_collect`'s findings), its long
    strings' encodings kept (:data:`_ENCODED`)."""
    longs: list[str] = []
    light = _lift(obj, longs) if found & (_LONG | _FLAGGED) else obj
    data = encode_json(light, default)
    if not longs:
        return data
    pieces = data.split(_PLACEHOLDER_OPENING)
    out = [pieces[0]]
    for piece in pieces[1:]:
        index, rest = piece.split(b'\\u0000"', 1)
        out.append(_ENCODED.get(longs[int(index)]))
        out.append(rest)
    return b"".join(out)


#: How a placeholder of :func:`_lift` starts, encoded (either encoder writes NUL so).
_PLACEHOLDER_OPENING = f'"\\u0000{_NONCE}'.encode()


def _lift(obj: Any, longs: list[str]) -> Any:
    """``obj`` with its long strings replaced by placeholders (copies only what changes)."""
    if isinstance(obj, str):
        if len(obj) < ENCODE_CACHE_MIN_CHARS:
            return obj
        longs.append(obj)
        return f"\x00{_NONCE}{len(longs) - 1}\x00"
    if isinstance(obj, dict):
        out = {k: _lift(v, longs) for k, v in obj.items()}
        return obj if all(out[k] is v for k, v in obj.items()) else out
    if isinstance(obj, list):
        items = [_lift(v, longs) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj)) else items
    return obj


# -- records -------------------------------------------------------------------------


def _redactor(texts: Iterable[str]) -> Callable[[str], str] | None:
    """``text -> text redacted`` for ``texts``: those not scanned before are scanned together,
    in one joined scan (a record's few short texts each cost a scan's fixed price otherwise),
    the others come from the cache of scanned texts. ``None`` when none of them has a secret
    (the usual case: the caller has nothing to rebuild)."""
    pending: dict[str, None] = {}
    found = 0
    for text in texts:
        found |= _collect_text(text, pending)
    results: dict[str, str] = {}
    if pending:
        _scan_many(list(pending), results)
    if not results and not found & _FLAGGED:
        return None
    return functools.partial(_scanned, results=results)


def _redact_message(m: Message, redacted: Callable[[str], str]) -> Message:
    content = redacted(m.content)
    calls = m.tool_calls
    if calls:
        calls = tuple(
            c if (arguments := redacted(c.arguments)) is c.arguments else attrs.evolve(c, arguments=arguments)
            for c in calls
        )
    if content is m.content and all(a is b for a, b in zip(calls, m.tool_calls)):
        return m
    return attrs.evolve(m, content=content, tool_calls=calls)


def _redact_metadata(
    metadata: dict[str, str], redacted: Callable[[str], str] = redact_text
) -> dict[str, str]:
    out = {k: redacted(v) for k, v in metadata.items()}
    return metadata if all(out[k] is v for k, v in metadata.items()) else out


def redact_exchange(exchange: Exchange) -> Exchange:
    """The exchange with secrets removed from its messages (text and tool-call arguments,
    which are JSON text: the redaction is escape-aware), system text, error and metadata.
    The same object when there was nothing to remove."""
    messages = (*exchange.input, *exchange.output)
    texts = [m.content for m in messages]
    texts += [c.arguments for m in messages for c in m.tool_calls]
    texts += [t for t in (exchange.system, exchange.error) if t]
    texts += exchange.metadata.values()
    redacted = _redactor(texts)
    if redacted is None:
        return exchange
    inputs = tuple(_redact_message(m, redacted) for m in exchange.input)
    outputs = tuple(_redact_message(m, redacted) for m in exchange.output)
    system = redacted(exchange.system) if exchange.system else exchange.system
    error = redacted(exchange.error) if exchange.error else exchange.error
    metadata = _redact_metadata(exchange.metadata, redacted)
    if (
        system is exchange.system
        and error is exchange.error
        and metadata is exchange.metadata
        and all(a is b for a, b in zip(inputs, exchange.input))
        and all(a is b for a, b in zip(outputs, exchange.output))
    ):
        return exchange
    return attrs.evolve(exchange, input=inputs, output=outputs, system=system, error=error, metadata=metadata)


def redact_fact(fact: Fact) -> Fact:
    """The fact with secrets removed from its text and metadata (the same object when
    there were none)."""
    text = redact_text(fact.text)
    metadata = _redact_metadata(fact.metadata)
    if text is fact.text and metadata is fact.metadata:
        return fact
    return attrs.evolve(fact, text=text, metadata=metadata)
