"""Corpora for redaction tests: fake credentials of many formats, the contexts they appear
in, and ordinary text that must come out of redaction unchanged.

Every value is made at import by a seeded generator over the format's real alphabet and
length, so they look like real credentials to a detector but are not, and no literal key
sits in this file for a secret scanner to flag. Plugin authors can run their own storage
or capture paths over :data:`SECRETS` x :data:`CONTEXTS` and assert with :func:`leaked`.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec

__all__ = [
    "CONTEXTS",
    "ORDINARY_TEXTS",
    "SECRETS",
    "Context",
    "FakeSecret",
    "corpus_text",
    "leaked",
    "leaks",
]

_rng = random.Random(14_15)
B62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
B64URL = B62 + "-_"
B64 = B62 + "+/"
HEX = "0123456789abcdef"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
DIGITS = "0123456789"
BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l".upper()


def _tok(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _password() -> str:
    """A human-made-looking password: letters, digits and a symbol."""
    return _tok(B62, 6) + _rng.choice("!#%*+-_.~") + _tok(DIGITS, 2) + _tok(B62, 5)


def _pem(label: str, lines: int = 6) -> tuple[str, str]:
    body = "\n".join(_tok(B64, 64) for _ in range(lines))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----", body


@dataclass(frozen=True)
class FakeSecret:
    """One fake credential: ``text`` as it appears (a key, a header line, a URL...),
    ``secret`` the part that must not survive redaction (``text`` itself by default),
    ``inline`` whether ``text`` fits in a URL or a single token position."""

    name: str
    text: str
    secret: str = ""
    inline: bool = True

    @property
    def value(self) -> str:
        """The part that must disappear."""
        return self.secret or self.text


def _secrets() -> list[FakeSecret]:
    s = FakeSecret
    out = [
        s("openai", "sk-" + _tok(B62, 48)),
        s("openai-project", "sk-proj-" + _tok(B64URL, 156)),
        s("openai-service-account", "sk-svcacct-" + _tok(B64URL, 100)),
        s("openai-admin", "sk-admin-" + _tok(B64URL, 80)),
        s("anthropic", "sk-ant-api03-" + _tok(B64URL, 93) + "AA"),
        s("anthropic-admin", "sk-ant-admin01-" + _tok(B64URL, 93) + "AA"),
        s("deepseek", "sk-" + _tok(HEX, 32)),
        s("openrouter", "sk-or-v1-" + _tok(HEX, 64)),
        s("xai", "xai-" + _tok(B62, 80)),
        s("google-api-key", "AIza" + _tok(B64URL, 35)),
        s("google-oauth-access-token", "ya29." + _tok(B64URL, 150)),
        s("google-oauth-client-secret", "GOCSPX-" + _tok(B64URL, 28)),
        s("aws-access-key-id", "AKIA" + _tok(UPPER, 16)),
        s("aws-temporary-key-id", "ASIA" + _tok(UPPER, 16)),
        s("github-classic", "ghp_" + _tok(B62, 36)),
        s("github-oauth", "gho_" + _tok(B62, 36)),
        s("github-fine-grained", "github_pat_" + _tok(B62, 22) + "_" + _tok(B62, 59)),
        s("gitlab", "glpat-" + _tok(B64URL, 20)),
        s("gitlab-deploy", "gldt-" + _tok(B64URL, 20)),
        s("slack-bot", "xoxb-" + _tok(DIGITS, 12) + "-" + _tok(DIGITS, 13) + "-" + _tok(B62, 24)),
        s("slack-user", "xoxp-" + _tok(DIGITS, 12) + "-" + _tok(DIGITS, 12) + "-" + _tok(HEX, 32)),
        s("slack-app", "xapp-1-A" + _tok(UPPER, 10) + "-" + _tok(DIGITS, 13) + "-" + _tok(HEX, 64)),
        s("stripe-live", "sk_" + "live_" + _tok(B62, 99)),
        s("stripe-restricted", "rk_" + "live_" + _tok(B62, 99)),
        s("stripe-test", "sk_" + "test_" + _tok(B62, 99)),
        s("stripe-webhook", "whsec_" + _tok(B62, 32)),
        s("huggingface", "hf_" + _tok(B62, 34)),
        s("huggingface-org", "api_org_" + _tok(B62, 34)),
        s("npm", "npm_" + _tok(B62, 36)),
        s("pypi", "pypi-" + "AgEIcHlwaS5vcmc" + _tok(B64URL, 150)),
        s("sendgrid", "SG." + _tok(B64URL, 22) + "." + _tok(B64URL, 43)),
        s("mailgun", "key-" + _tok(HEX, 32)),
        s("mailchimp", _tok(HEX, 32) + "-us21"),
        s("twilio", "SK" + _tok(HEX, 32)),
        s("databricks", "dapi" + _tok(HEX, 32)),
        s("digitalocean", "dop_v1_" + _tok(HEX, 64)),
        s("shopify", "shpat_" + _tok(HEX, 32)),
        s("linear", "lin_api_" + _tok(B62, 40)),
        s("notion", "ntn_" + _tok(B62, 46)),
        s("notion-legacy", "secret_" + _tok(B62, 43)),
        s("groq", "gsk_" + _tok(B62, 52)),
        s("replicate", "r8_" + _tok(B62, 37)),
        s("perplexity", "pplx-" + _tok(B62, 48)),
        s("vault", "hvs." + _tok(B64URL, 90)),
        s("age", "AGE-SECRET-KEY-1" + _tok(BECH32, 58)),
        s("square", "sq0atp-" + _tok(B64URL, 22)),
        s("newrelic", "NRAK-" + _tok(UPPER, 27)),
        s("atlassian", "ATATT3" + _tok(B64URL, 180) + "=" + _tok(HEX, 8).upper()),
        s("bitbucket", "ATBB" + _tok(B62, 32)),
        s("facebook", "EAAC" + _tok(B62, 180)),
        s("grafana", "glsa_" + _tok(B62, 32) + "_" + _tok(HEX, 8)),
        s("grafana-cloud", "glc_" + _b64url(json.dumps({"o": _tok(DIGITS, 6), "k": _tok(B62, 24)}).encode())),
        s(
            "sentry",
            "sntrys_"
            + _b64url(json.dumps({"iat": 1, "url": "https://sentry.io"}).encode())
            + "_"
            + _tok(B62, 43),
        ),
        s("heroku", "HRKU-AA" + _tok(B64URL, 58)),
        s("figma", "figd_" + _tok(B64URL, 40)),
        s("doppler", "dp.pt." + _tok(B62, 43)),
        s("postman", "PMAK-" + _tok(HEX, 24) + "-" + _tok(HEX, 34)),
        s("terraform", _tok(B62, 14) + ".atlasv1." + _tok(B64URL, 67)),
        s("firebase-fcm", "AAAA" + _tok(B64URL, 7) + ":APA91b" + _tok(B64URL, 134)),
        s("dropbox", "sl." + _tok(B64URL, 136)),
        s("azure-ad-client-secret", _tok(B62, 3) + _tok(DIGITS, 1) + "Q~" + _tok(B62 + "_.-", 34)),
        s("discord-bot", _b64url(_tok(DIGITS, 18).encode()) + "." + _tok(B64URL, 6) + "." + _tok(B64URL, 38)),
        s("telegram-bot", _tok(DIGITS, 10) + ":AA" + _tok(B64URL, 33)),
    ]
    jwt = ".".join(
        [
            _b64url(b'{"alg":"HS256","typ":"JWT"}'),
            _b64url(json.dumps({"sub": _tok(DIGITS, 10), "name": "Alice", "iat": 1716000000}).encode()),
            _tok(B64URL, 43),
        ]
    )
    out.append(s("jwt", jwt))
    hook = _tok(B62, 24)
    path = f"T{_tok(UPPER, 8)}/B{_tok(UPPER, 8)}/{hook}"
    out.append(s("slack-webhook", f"https://hooks.slack.com/services/{path}", secret=hook))
    hook = _tok(B64URL, 68)
    out.append(
        s("discord-webhook", f"https://discord.com/api/webhooks/{_tok(DIGITS, 18)}/{hook}", secret=hook)
    )
    hook = _tok(B64URL, 68)
    out.append(
        s("discordapp-webhook", f"https://discordapp.com/api/webhooks/{_tok(DIGITS, 18)}/{hook}", secret=hook)
    )
    pw = _password()
    out.append(s("postgres-url", f"postgres://app_user:{pw}@db.internal:5432/app", secret=pw))
    pw = _password()
    out.append(s("https-url-credentials", f"https://deploy:{pw}@git.example.com/org/repo.git", secret=pw))
    pw = _password()
    out.append(
        s("mongodb-url", f"mongodb+srv://admin:{pw}@cluster0.example.net/db?retryWrites=true", secret=pw)
    )
    basic = base64.b64encode(f"alice:{_password()}".encode()).decode()
    out.append(s("authorization-basic", f"Authorization: Basic {basic}", secret=basic, inline=False))
    bearer = _tok(B62, 40)
    out.append(s("authorization-bearer", f"Authorization: Bearer {bearer}", secret=bearer, inline=False))
    token = _tok(B64URL, 32)
    out.append(s("authorization-token", f"Authorization: Token {token}", secret=token, inline=False))
    bearer = _tok(HEX, 40)
    out.append(s("bearer-in-prose", f"call it with bearer {bearer} please", secret=bearer, inline=False))
    basic = base64.b64encode(f"deploy:{_password()}".encode()).decode()
    out.append(s("basic-in-curl", f"curl -H 'authorization: basic {basic}' https://x.example", secret=basic,
                 inline=False))  # fmt: skip
    pw = _password()
    out.append(s("password-assignment", f"password={pw}", secret=pw))
    pw = _password()
    out.append(s("env-password", f"DB_PASSWORD={pw}", secret=pw))
    pw = _password()
    out.append(s("yaml-password", f"password: {pw}", secret=pw, inline=False))
    pw = _tok("abcdefghijklmnopqrstuvwxyz", 14)
    out.append(s("json-password", f'"password": "{pw}"', secret=pw, inline=False))
    pw = _password()
    out.append(s("cli-password", f"--password {pw}", secret=pw, inline=False))
    key = _tok(B62, 50)
    out.append(s("secret-key-assignment", f"SECRET_KEY = '{key}'", secret=key, inline=False))
    key = _tok(HEX, 32)
    out.append(s("api-key-assignment", f"api_key: {key}", secret=key, inline=False))
    key = _tok(B64, 40)
    out.append(s("aws-secret-access-key", f"aws_secret_access_key = {key}", secret=key, inline=False))
    key = _tok(B64, 86) + "=="
    out.append(
        s(
            "azure-storage-connection-string",
            f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={key};EndpointSuffix=core.windows.net",
            secret=key,
            inline=False,
        )
    )
    sig = _tok(B62, 30) + "%2B" + _tok(B62, 10) + "%3D"
    out.append(
        s(
            "azure-sas-url",
            "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&se=2030-01-01T00:00:00Z&sig="
            + sig,
            secret=sig,
        )
    )
    sid = _tok(B62, 32)
    out.append(
        s(
            "cookie-header",
            f"Cookie: theme=dark; sessionid={sid}; csrftoken={_tok(B62, 32)}",
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(B64URL, 43)
    out.append(
        s(
            "set-cookie-header",
            f"Set-Cookie: __Host-session={sid}; Path=/; Secure; HttpOnly; SameSite=Lax",
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(HEX, 40)
    out.append(
        s(
            "curl-cookie-header",
            f"curl -H 'cookie: sid={sid}' https://app.example.com/api/me",
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(B62, 40)
    out.append(
        s(
            "curl-cookie-flag",
            f"curl -b 'session={sid}; lang=en' https://app.example.com/",
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(B64URL, 48)
    out.append(
        s(
            "curl-cookie-long-flag",
            f'curl --cookie "_app_session={sid}" https://x.example.com',
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(B62, 32)
    out.append(
        s(
            "cookie-jar-line",
            f".example.com\tTRUE\t/\tTRUE\t1767225600\tsessionid\t{sid}",
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(B62, 32)
    out.append(
        s(
            "cookie-jar-httponly-line",
            f"#HttpOnly_app.example.com\tFALSE\t/\tFALSE\t0\tconnect.sid\ts%3A{sid}",
            secret=sid,
            inline=False,
        )
    )
    sid = _tok(B64URL, 40)
    har: dict[str, Any] = {
        "request": {
            "method": "GET",
            "url": "https://app.example.com/",
            "headers": [{"name": "Accept", "value": "text/html"}, {"name": "Cookie", "value": f"sid={sid}"}],
        }
    }
    out.append(s("har-cookie-header", json.dumps(har, indent=2), secret=sid, inline=False))
    sid = _tok(B62, 36)
    har = {
        "response": {
            "status": 200,
            "cookies": [{"name": "JSESSIONID", "value": sid, "path": "/", "httpOnly": True}],
        }
    }
    out.append(s("har-cookies", json.dumps(har), secret=sid, inline=False))
    dsn = _tok(HEX, 32)
    out.append(
        s("sentry-dsn", f"https://{dsn}@o{_tok(DIGITS, 6)}.ingest.sentry.io/{_tok(DIGITS, 7)}", secret=dsn)
    )
    dsn = _tok(HEX, 32)
    out.append(
        s("sentry-dsn-env", f"SENTRY_DSN=https://{dsn}@sentry.example.com/12", secret=dsn, inline=False)
    )
    tok = _tok(B64URL, 40)
    out.append(
        s("url-access-token", f"https://api.example.com/v2/me?access_token={tok}&fields=id", secret=tok)
    )
    tok = _tok(B62, 32)
    out.append(s("url-token-query", f"https://files.example.com/d/report.pdf?token={tok}", secret=tok))
    for label in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY", "PGP PRIVATE KEY BLOCK"):
        pem, body = _pem(label)
        out.append(s("pem-" + label.split()[0].lower(), pem, secret=body, inline=False))
    pem, body = _pem("PRIVATE KEY", 8)
    account = {
        "type": "service_account",
        "project_id": "demo-project",
        "private_key_id": _tok(HEX, 40),
        "private_key": pem + "\n",
        "client_email": "svc@demo-project.iam.gserviceaccount.com",
    }
    out.append(s("gcp-service-account-json", json.dumps(account, indent=2), secret=body, inline=False))
    return out


#: Fake credentials, one per format (more than 60 formats).
SECRETS: tuple[FakeSecret, ...] = tuple(_secrets())


@dataclass(frozen=True)
class Context:
    """A way a credential appears in text; ``inline_only`` contexts need a one-token value."""

    name: str
    wrap: Callable[[str], str]
    inline_only: bool = False


def _json_nested(t: str) -> str:
    return json.dumps({"name": "bash", "arguments": json.dumps({"command": f"export X=1\n{t}\necho ok"})})


CONTEXTS: tuple[Context, ...] = (
    Context("after-space", lambda t: f"my credential is {t} thanks"),
    Context("after-newline", lambda t: f"first line\n{t}\nlast line"),
    Context("after-crlf", lambda t: f"first line\r\n{t}\r\n"),
    Context("after-tab", lambda t: f"column\t{t}\tnext"),
    Context("start", lambda t: f"{t} is what I use"),
    Context("end", lambda t: f"use this one: {t}"),
    Context("double-quotes", lambda t: f'config = "{t}"'),
    Context("single-quotes", lambda t: f"value '{t}' here"),
    Context("parentheses", lambda t: f"(see {t})"),
    Context("angle-brackets", lambda t: f"<{t}>"),
    Context("markdown-code", lambda t: f"```\n{t}\n```"),
    Context("ansi-colour", lambda t: f"\x1b[32m{t}\x1b[0m done"),
    Context("json-text", lambda t: json.dumps({"note": f"see\n{t}\nok", "n": 1})),
    Context("json-ascii-escapes", lambda t: json.dumps({"note": f"é\x0b{t}"}, ensure_ascii=True)),
    Context("json-escaped-slashes", lambda t: json.dumps({"note": f"a\n{t}"}).replace("/", "\\/")),
    Context("tool-arguments-in-json", _json_nested),
    Context("after-equals", lambda t: f"TOKEN={t}", inline_only=True),
    Context("after-colon", lambda t: f"credential:{t}", inline_only=True),
    Context("url-query", lambda t: f"https://api.example.com/v1/items?auth={t}&page=2", inline_only=True),
    Context("url-path", lambda t: f"https://api.example.com/keys/{t}/rotate", inline_only=True),
    Context("url-encoded", lambda t: f"q=hello%20{t}%0Anext", inline_only=True),
)


def leaked(secret: FakeSecret | str, text: str) -> bool:
    """Whether ``text`` holds the secret or any 12-character piece of it (a partial
    redaction that leaves half a key is a leak too)."""
    value = secret.value if isinstance(secret, FakeSecret) else secret
    if len(value) <= 16:
        return value in text
    return any(value[i : i + 12] in text for i in range(0, len(value) - 11, 3))


def leaks(text: str) -> list[str]:
    """The names of the :data:`SECRETS` that ``text`` holds (any piece of)."""
    return [s.name for s in SECRETS if leaked(s, text)]


def corpus_text(context: Context) -> str:
    """Every secret of :data:`SECRETS` that fits ``context``, wrapped in it, one per line."""
    return "\n".join(context.wrap(s.text) for s in SECRETS if s.inline or not context.inline_only)


def send_openai_chat_calls(client: Any, server: ScriptedModelServer, text: str) -> int:
    """Carry ``text`` through every kind of Chat Completions call an app makes, with the
    openai ``client`` against ``server`` (the upstream the client reaches, directly or
    through the proxy): in the system and user messages, streamed, as a tool call's
    arguments and as its result. Returns the number of calls made (4)."""
    client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": text}, {"role": "user", "content": text}]
    )
    for _ in client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}], stream=True
    ):
        pass
    server.script(Reply(tool_calls=(ToolCallSpec(name="run", arguments=json.dumps({"cmd": text})),)))
    first = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "run it"}])
    call = first.choices[0].message.tool_calls[0]
    client.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "run it"},
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": text},
        ],
    )
    return 4


def _data_uri() -> str:
    rng = random.Random(7)
    png = b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(3000))
    return "data:image/png;base64," + base64.b64encode(png).decode()


_TOOLS = json.dumps(
    [
        {
            "name": "Read",
            "description": "Reads a file from the local filesystem. The file_path parameter must be an "
            "absolute path. By default, it reads up to 2000 lines; use offset and limit for long files.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The absolute path to the file to read"},
                    "offset": {"type": "number"},
                    "limit": {"type": "number"},
                },
                "required": ["file_path"],
                "additionalProperties": False,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        },
        {
            "name": "Bash",
            "description": "Executes a bash command with an optional timeout (max 600000ms).",
            "input_schema": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
                    "run_in_background": {"type": "boolean"},
                },
                "required": ["command"],
            },
        },
        {
            "name": "WebFetch",
            "description": "Fetches content from a URL; an api_key or token is never needed.",
            "input_schema": {
                "type": "object",
                "properties": {"url": {"type": "string", "format": "uri"}, "prompt": {"type": "string"}},
            },
        },
    ],
    indent=2,
)

#: Ordinary text of many kinds (agent prompts, code, JSON, logs, URLs, hashes, base64 data)
#: that redaction must leave exactly as it is.
ORDINARY_TEXTS: tuple[tuple[str, str], ...] = (
    (
        "agent-system-prompt",
        "You are an interactive CLI agent. When a <task-notification> arrives, summarise it in one line.\n"
        "Work risk-first: run the failing test before you edit. Use the Bash tool for git; use the Read\n"
        "tool to read files (max_tokens: 8192, temperature: 0). Never print an API key or a password.\n"
        "IMPORTANT: the user's token budget is limited; prefer short answers.\n"
        "<system-reminder>As you answer, use the TodoWrite tool to track task-level progress."
        "</system-reminder>\n"
        "Today's date: 2025-06-14. Working directory: /home/alice/src/memtap (git repo: yes, branch main).",
    ),
    ("tool-definitions", _TOOLS),
    (
        "python-code",
        "import os\n\n"
        "def connect(host: str, password: str | None = None, *, api_key: str | None = None) -> Client:\n"
        '    api_key = api_key or os.environ["OPENAI_API_KEY"]\n'
        "    password = password or get_password()\n"
        "    token = get_token(scope='read')\n"
        '    headers = {"Authorization": f"Bearer {token}", "x-api-key": api_key}\n'
        "    client = Client(host=host, password=password, api_key=api_key, max_tokens=1024)\n"
        "    client.secret_key = settings.secret_key\n"
        "    return client\n",
    ),
    (
        "typed-settings",
        "class Settings(BaseSettings):\n    database_url: str\n"
        "    password: SecretStr = Field(..., min_length=12)\n"
        '    api_key: str = ""\n    token_ttl_seconds: int = 3600\n'
        '    auth: Literal["oauth", "basic"] = "oauth"\n',
    ),
    (
        "ids-and-hashes",
        "request 3f2c9a1b-8d7e-4c5f-9a0b-1c2d3e4f5a6b, commit 9fceb02d0ae598e95dc970b74767f19372d61af8,\n"
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, md5 "
        "d41d8cd98f00b204e9800998ecf8427e, image ghcr.io/org/app@sha256:"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, ulid 01HZY8QK7Z9XW3V5T2R1P0N9M8",
    ),
    ("base64-image", _data_uri()),
    (
        "urls-without-credentials",
        "https://github.com/org/repo/blob/main/src/app.py#L10 https://www.google.com/search?q=python+regex&hl=en\n"
        "postgresql://localhost:5432/app http://[::1]:8080/healthz https://alice@github.com/org/repo.git\n"
        "https://api.example.com/v1/items?page=2&sort=desc&limit=50 ftp://ftp.example.org/pub/file.tar.gz\n"
        "https://oauth2.googleapis.com/token?grant_type=refresh_token",
    ),
    (
        "logs",
        "2025-06-14T10:00:00Z INFO request_id=3f2c9a1b status=200 duration_ms=12 token_count=512\n"
        "2025-06-14T10:00:01Z WARN retrying (attempt=2, backoff=0.5s) key=user:42 cache_key=sessions:alice\n"
        "2025-06-14T10:00:02Z ERROR auth failed for user alice: invalid password (attempt 3 of 5)",
    ),
    (
        "shell",
        "$ git log --oneline -n 5\n$ docker run -e LOG_LEVEL=debug -p 8080:8080 ghcr.io/org/app:1.2.3\n"
        "$ curl -H 'Content-Type: application/json' -d '{\"q\": 1}' https://api.example.com/search\n"
        "$ pip install scikit-learn sk-video && kubectl get secrets -n prod\n"
        "$ export PATH=$PATH:/usr/local/bin; ssh-keygen -t ed25519 -C alice@example.com\n"
        "$ docker login --password-stdin < token.txt",
    ),
    (
        "prose-about-secrets",
        "Never paste your API key into the chat. The bearer of this letter is my friend. Basic usage: run "
        "the script. Reset your password: open Settings, then Security. Set the token: in the dashboard. "
        "AKIA "
        "is the prefix AWS uses for access key ids, and ghp_ tokens are GitHub's. Use sk-learn for the "
        "baseline, or sk-learn-compatible-estimators. The password policy requires 12 characters.",
    ),
    (
        "config-without-secrets",
        "password_min_length: 12\nauth: oauth\ntoken_url: https://oauth2.googleapis.com/token\n"
        "api_key_header: X-API-Key\nsecret_name: prod/db/credentials\npassword: ${DB_PASSWORD}\n"
        "token: <your token here>\napi_key: ********\nprimary_key: id\nsort_key: created_at",
    ),
    (
        "public-keys-and-certificates",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2gIa3m5pZ8q1WQ0m2b3c4d5e6f7\n"
        "-----END CERTIFICATE-----\n"
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEyw==\n-----END PUBLIC KEY-----\n"
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop",
    ),
    (
        "unicode-and-markdown",
        "| name | value |\n|---|---|\n| 東京 | 日本語のテキスト 🎉 |\n\n> **Note**: `task-notification` "
        'events are risk-first.\n<div class="task-notification" style="color: #ff00aa">ok</div>',
    ),
    (
        "cookies-and-urls-without-secrets",
        "Set the cookie: a name and a value. The cookie-consent banner stores cookie: accepted.\n"
        "Set-Cookie: theme=dark; Path=/; Max-Age=31536000\nCookie: lang=en; tz=UTC\n"
        "$ curl -b cookies.txt -c cookies.txt https://example.com && git checkout -b feature/login-2024\n"
        "$ curl --cookie-jar jar.txt https://example.com; ls -b /tmp\n"
        '{"headers": [{"name": "Accept", "value": "text/html"}, {"name": "Cookie", "value": "lang=en"}],'
        ' "cookies": [{"name": "lang", "value": "en"}], "fields": [{"name": "id", "value": '
        '"3f2c9a1b-8d7e-4c5f-9a0b-1c2d3e4f5a6b"}]}\n'
        ".example.com\tTRUE\t/\tFALSE\t0\tlang\ten\n"
        "name\tTRUE\t12\tchecked\nSENTRY_DSN=https://examplePublicKey@o0.ingest.sentry.io/0 "
        "https://alice@github.com/org/repo.git ssh://git@github.com/org/repo.git "
        "https://user@example.com:8443/x?page=2&token_type=bearer&sig_version=2",
    ),
    (
        "json-messages",
        json.dumps(
            {
                "model": "claude-sonnet-4",
                "max_tokens": 4096,
                "metadata": {"user_id": "user_3f2c9a1b8d7e4c5f_account__session_9a0b1c2d"},
                "messages": [{"role": "user", "content": "Fix the failing test in tests/test_auth.py"}],
            }
        ),
    ),
)
