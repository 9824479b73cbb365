from __future__ import annotations

import datetime
import json

import pytest

from memtap.hookspecs import hookimpl
from memtap.memory import plugin_manager
from memtap.protocol.model import Attribution, Exchange, Message, ToolCall, utcnow
from memtap.protocol.wire import RawExchange
from memtap.redact import REDACTED, redact_exchange, redact_text

SECRETS = {
    "openai": "sk-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0",
    "openai-project": "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90Uv12Wx34_yZ-9AbCd",
    "anthropic": "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe_Dc-BaZx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1-AA",
    "xai": "xai-" + "Qw3Er4Ty5Ui6Op7As8Df9Gh0Jk1Lz2Xc3Vb4Nm5" * 2,
    "google": "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hI6",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r",
    "bearer-lowercase": "bearer 0123456789abcdef0123456789abcdef",
    "pem-rsa": (
        "-----BEGIN RSA PRIVATE KEY-----\n"
        "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi6Z1o5H0Pm9Zk2XrVnW+Bq1xYb\n"
        "c3l6QmR0bXo5cGJ6ZjN0Z2hqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk=\n"
        "-----END RSA PRIVATE KEY-----"
    ),
    "pem-pkcs8": (
        "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n"
        "-----END PRIVATE KEY-----"
    ),
    "pem-openssh": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
        "-----END OPENSSH PRIVATE KEY-----"
    ),
}


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_secret_in_prose_is_replaced(secret):
    assert redact_text(f"my key is {secret} thanks") == f"my key is {REDACTED} thanks"


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_secret_in_json_is_replaced_and_json_stays_valid(secret):
    text = json.dumps({"credential": secret, "n": 1})
    redacted = redact_text(text)
    assert json.loads(redacted) == {"credential": REDACTED, "n": 1}


def test_several_secrets_in_one_text_are_all_replaced():
    text = "\n".join(f"{name}={value}" for name, value in SECRETS.items())
    redacted = redact_text(text)
    for value in SECRETS.values():
        assert value not in redacted
    assert redacted.count(REDACTED) == len(SECRETS)


def test_authorization_header_value_is_removed():
    header = f"Authorization: {SECRETS['bearer']}"
    assert redact_text(header) == f"Authorization: {REDACTED}"


NORMAL_TEXTS = [
    "",
    "Ask me anything about the task-based scheduler.",
    "Use sk-learn for the baseline.",
    "The bearer of this letter is my friend.",
    "AKIA is the prefix AWS uses for access key ids.",
    "ghp_ tokens are GitHub's personal access tokens.",
    "Request id 3f2c9a1b-8d7e-4c5f-9a0b-1c2d3e4f5a6b, commit 9fceb02d0ae598e95dc970b74767f19372d61af8.",
    "See https://example.com/docs?page=2&lang=en or mail alice@example.com.",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ\n-----END CERTIFICATE-----",
    "system: be nice\nassistant: 日本語のテキスト 🎉",
]


@pytest.mark.parametrize("text", NORMAL_TEXTS)
def test_normal_text_is_untouched(text):
    assert redact_text(text) == text


FIXED_TIME = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def exchange_with_secrets() -> Exchange:
    key = SECRETS["openai"]
    return Exchange(
        attribution=Attribution(entity_id="alice", session_id="s1"),
        provider="test",
        operation="chat",
        input=[
            Message(role="user", content=f"use {key} please"),
            Message(role="tool", content=f"token {SECRETS['github']}", tool_call_id="c0"),
        ],
        output=[
            Message(
                role="assistant",
                content="calling the tool",
                tool_calls=[
                    ToolCall(id="c1", name="deploy", arguments=json.dumps({"api_key": key, "region": "eu"}))
                ],
            )
        ],
        system=f"The AWS key is {SECRETS['aws']}.",
        error=f"401 for {SECRETS['bearer']}",
        metadata={"auth": SECRETS["bearer"], "note": "plain"},
        started_at=FIXED_TIME,
        ended_at=FIXED_TIME,
        id="ex-secret",
    )


def test_redact_exchange_covers_messages_tool_calls_system_error_and_metadata():
    redacted = redact_exchange(exchange_with_secrets())
    dumped = json.dumps(
        [
            [m.content for m in redacted.messages],
            [c.arguments for m in redacted.messages for c in m.tool_calls],
            redacted.system,
            redacted.error,
            redacted.metadata,
        ]
    )
    for value in SECRETS.values():
        assert value not in dumped
    assert redacted.input[0].content == f"use {REDACTED} please"
    assert json.loads(redacted.output[0].tool_calls[0].arguments) == {"api_key": REDACTED, "region": "eu"}
    assert redacted.output[0].tool_calls[0].name == "deploy"
    assert redacted.system == f"The AWS key is {REDACTED}."
    assert redacted.metadata == {"auth": REDACTED, "note": "plain"}


def test_redact_exchange_leaves_a_clean_exchange_equal():
    clean = Exchange(
        attribution=Attribution(),
        provider="test",
        operation="chat",
        input=[Message(role="user", content="hello")],
        output=[
            Message(role="assistant", content="hi", tool_calls=[ToolCall(id="c", name="f", arguments="{}")])
        ],
        metadata={"k": "v"},
    )
    assert redact_exchange(clean) == clean


class _Protocol:
    name = "test.chat"
    provider = "test"
    operation = "chat"


class LeakyFormatter:
    @hookimpl(tryfirst=True)
    def memtap_format_exchange(self, raw: RawExchange) -> Exchange:
        return exchange_with_secrets()


def raw_exchange() -> RawExchange:
    now = utcnow()
    return RawExchange(
        protocol=_Protocol(),
        attribution=Attribution(),
        request_body={"messages": []},
        response={},
        stream_result=None,
        already_present=0,
        started_at=now,
        ended_at=now,
    )


def test_redact_plugin_wraps_whatever_a_formatter_returns(monkeypatch):
    monkeypatch.delenv("MEMTAP_DISABLE_PLUGINS", raising=False)
    pm = plugin_manager(entry_points=False, extra=[LeakyFormatter()])
    exchange = pm.hook.memtap_format_exchange(raw=raw_exchange())
    assert exchange == redact_exchange(exchange_with_secrets())
    assert exchange.input[0].content == f"use {REDACTED} please"


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_a_text_not_remembered_is_redacted_alike_and_left_out_of_the_cache(secret):
    from memtap.redact import new_text

    text = json.dumps({"id": f"answer-{secret[:3]}", "content": f"the key is {secret}, use it once"})
    assert redact_text(text, remember=False) == redact_text(text)
    unique = text.replace("answer-", "unique-answer-")
    redacted = redact_text(unique, remember=False)
    assert secret not in redacted
    assert new_text(unique, 10**9) == len(unique)  # not kept: a later scan of it starts afresh
    assert redact_text(unique) == redacted


class _Text(str):
    pass


def test_structures_of_other_types_than_dict_list_and_str_are_redacted_alike():
    import collections

    from memtap.redact import dumps_redacted, redact_json

    secret = SECRETS["openai"]
    plain = {
        "messages": [{"role": "user", "content": f"key {secret}"}, ("t", f"x {secret}")],
        "password": "hunter2",
    }
    odd = collections.OrderedDict(
        messages=[
            collections.defaultdict(str, role="user", content=_Text(f"key {secret}")),
            ("t", f"x {secret}"),
        ],
        password=_Text("hunter2"),
    )
    expected = {
        "messages": [{"role": "user", "content": f"key {REDACTED}"}, ["t", f"x {REDACTED}"]],
        "password": REDACTED,
    }
    assert json.loads(dumps_redacted(plain)) == expected
    assert json.loads(dumps_redacted(odd)) == expected
    assert json.loads(json.dumps(redact_json(odd))) == expected
    assert redact_json({"a": (1, 2.5, None, True, "clean text here")}) == {
        "a": (1, 2.5, None, True, "clean text here")
    }


def test_a_clean_exchange_with_tool_calls_is_returned_as_it_is():
    clean = Exchange(
        attribution=Attribution(),
        provider="test",
        operation="chat",
        input=[Message("user", "deploy the service to the eu region please")],
        output=[Message("assistant", "", tool_calls=[ToolCall("c1", "deploy", '{"region": "eu-west-1"}')])],
        system="You are a careful deployment assistant.",
        metadata={"note": "plain words only"},
    )
    assert redact_exchange(clean) is clean


@pytest.mark.parametrize("secret", SECRETS.values(), ids=SECRETS.keys())
def test_every_field_of_an_exchange_is_redacted_on_its_own(secret):
    """The texts of a record are scanned together: a secret is found in whichever field it
    is, whole or at a field's very start or end, and no field takes another's text."""
    exchange = Exchange(
        attribution=Attribution(),
        provider="test",
        operation="chat",
        input=[Message("user", secret), Message("user", f"ends with {secret}")],
        output=[
            Message(
                "assistant",
                f"{secret} starts it",
                tool_calls=[ToolCall("c1", "f", json.dumps({"k": secret}))],
            )
        ],
        system=f"key:{secret}",
        error=secret,
        metadata={"a": secret, "b": "plain words"},
    )
    redacted = redact_exchange(exchange)
    assert [m.content for m in redacted.input] == [REDACTED, f"ends with {REDACTED}"]
    assert redacted.output[0].content == f"{REDACTED} starts it"
    assert json.loads(redacted.output[0].tool_calls[0].arguments) == {"k": REDACTED}
    assert secret not in (redacted.system or "") and REDACTED in (redacted.system or "")
    assert redacted.error == REDACTED
    assert redacted.metadata == {"a": REDACTED, "b": "plain words"}


def test_short_texts_found_clean_are_not_scanned_again_and_short_secrets_always_are(monkeypatch):
    """A body's keys and short values recur on every call: once found clean they are not
    scanned again. A short secret is never taken for clean, however often it comes."""
    from memtap import redact
    from memtap.redact import caches, scanner

    redact.clear_cache()
    scanned: list[str] = []
    spans = scanner._SCANNER.spans
    monkeypatch.setattr(scanner._SCANNER, "spans", lambda text: scanned.append(text) or spans(text))
    body = {"finish_reason": "assistant", "messages": [{"role": "user", "content": "tool_calls"}]}
    assert redact.redact_json(body) is body
    assert scanned
    scanned.clear()
    assert redact.redact_json(body) is body and redact.redact_text("tool_calls") == "tool_calls"
    assert redact.new_text(body, 100) == 0
    assert scanned == []  # every string of it known clean
    aws = SECRETS["aws"]
    assert len(aws) < redact.CACHE_MIN_CHARS
    for _ in range(2):
        assert redact.redact_json({"key_id": aws, "note": "assistant"}) == {
            "key_id": REDACTED,
            "note": "assistant",
        }
        assert redact.redact_text(aws) == REDACTED
        assert aws not in caches._CLEAN_SHORT


@pytest.mark.parametrize("secret_key", ["aws", "github"])
def test_keys_found_clean_cost_a_lookup_and_secret_keys_are_redacted_every_time(monkeypatch, secret_key):
    """A mapping's keys recur on every call: a key found clean is remembered with its kind
    (not scanned again, and a secret-named key still takes its value out); a key that is
    itself a secret is never remembered, and is redacted each time it comes."""
    from memtap import redact
    from memtap.redact import caches, scanner

    redact.clear_cache()
    secret = SECRETS[secret_key]
    scanned: list[str] = []
    spans = scanner._SCANNER.spans
    monkeypatch.setattr(scanner._SCANNER, "spans", lambda text: scanned.append(text) or spans(text))
    body = {"finish_reason_long_key_name": {"password": "Tr0ub4dor&3x", "system_fingerprint": 1}}
    expected = {"finish_reason_long_key_name": {"password": REDACTED, "system_fingerprint": 1}}
    assert redact.redact_json(body) == expected
    assert scanned
    scanned.clear()
    for _ in range(2):
        assert redact.redact_json(body) == expected
        assert scanned == []  # every key known clean, no value to scan
        assert {"finish_reason_long_key_name", "password", "system_fingerprint"} <= set(caches._CLEAN_KEYS)
    for _ in range(3):
        assert redact.redact_json({secret: "value"}) == {REDACTED: "value"}
        assert secret not in caches._CLEAN_KEYS
    redact.clear_cache()
    assert caches._CLEAN_KEYS == {}


def test_the_clean_keys_are_bounded(monkeypatch):
    from memtap import redact
    from memtap.redact import caches, structures

    redact.clear_cache()
    monkeypatch.setattr(structures, "_CLEAN_KEYS_MAX", 50)
    for i in range(200):
        assert redact.redact_json({f"key number {i}": i}) == {f"key number {i}": i}
        redact.redact_json({f"key number {i}": i})  # known clean now: remembered if room
    assert len(caches._CLEAN_KEYS) == 50


def test_the_set_of_short_clean_texts_is_bounded(monkeypatch):
    from memtap import redact
    from memtap.redact import caches

    redact.clear_cache()
    monkeypatch.setattr(caches, "CLEAN_SHORT_MAX", 100)
    for i in range(1000):
        assert redact.redact_text(f"word number {i}") == f"word number {i}"
        assert len(caches._CLEAN_SHORT) <= 100
    assert "word number 999" in caches._CLEAN_SHORT


@pytest.mark.parametrize(
    "value",
    [
        {
            "model": "m",
            "messages": [{"role": "user", "content": 'é "quoted" \n tab\t'}],
            "n": 1.5,
            "ok": None,
        },
        [1, "two", {"three": [True, False]}],
        "plain text é",
        42,
        {"nan": float("nan"), "inf": float("inf"), "nested": {"object": datetime.date(2025, 1, 2)}},
    ],
)
def test_the_compact_encoder_writes_what_json_dumps_writes(value):
    from memtap.redact import compact_encoder

    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    assert compact_encoder(str).encode(value) == expected
    with pytest.raises(TypeError):
        compact_encoder(None).encode({"object": object()})
