"""The credential formats memtap recognises (:data:`DETECTORS`), and where a secret may start.

**Boundaries.** A secret must not start inside a word (that is what keeps ``sk-`` in
"task-notification" out), but JSON text puts letters right before it: ``\\nsk-...`` or
``\\u000bAKIA...``. A secret may therefore start after a non-alphanumeric character, after
a JSON escape (``\\n``, ``\\t``, ``\\r``, ``\\b``, ``\\f``, ``\\uXXXX``), a URL escape
(``%0A``) or a terminal colour code (``\\x1b[0m``) (:func:`_starts_word`). Replacements never
split an escape, so redacted JSON text stays valid JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from memtap.redact.validators import (
    _basic_credentials,
    _bearer,
    _cookie_value,
    _discord_bot,
    _random_key,
    _real_password,
    looks_random,
)

#: No secret format is shorter than this (``pwd=abc1``).
MIN_SECRET_CHARS = 7


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
    pivot's :data:`~memtap.redact.scanner.PIVOT_AHEAD`; or the whole ``after`` when ``before`` is empty).
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
