"""Secrets by their key: ``key = value``, ``"key": "value"``, ``--key value``, curl's
``-b 'sid=...'`` and the cookies of a HAR file; the candidate gates that find them."""

from __future__ import annotations

import re

from memtap.protocol.secret_names import key_kind
from memtap.redact.detectors import _starts_word
from memtap.redact.validators import (
    _HAS_DIGIT_AND_LETTER,
    _PLACEHOLDER,
    _basic_credentials,
    _cookie_header,
    _cookie_value,
    looks_random,
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
_MAX_VALUE = 512


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
