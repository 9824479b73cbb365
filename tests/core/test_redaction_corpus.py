"""Redaction as a defect class: every credential format of the corpus, in every context
(after a space, a newline, JSON escapes, tool arguments, URLs...), is removed from text,
JSON text and decoded structures; ordinary text comes out unchanged (false positives
counted: zero)."""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtap.capture.spool import encode_record
from memtap.protocol.model import Attribution
from memtap.redact import (
    DETECTORS,
    REDACTED,
    find_secrets,
    redact_json,
    redact_stream,
    redact_stream_events,
    redact_text,
    redact_url,
    scanner,
)
from memtap.testing.secrets import CONTEXTS, ORDINARY_TEXTS, SECRETS, FakeSecret, leaked

REPO = Path(__file__).resolve().parents[2]
JSON_CONTEXTS = {"json-text", "json-ascii-escapes", "json-escaped-slashes", "tool-arguments-in-json"}


def contexts_for(secret: FakeSecret) -> list[Any]:
    return [c for c in CONTEXTS if secret.inline or not c.inline_only]


def test_the_corpus_is_broad():
    assert len({s.name for s in SECRETS}) >= 40
    assert {"after-space", "after-newline", "json-text", "tool-arguments-in-json", "url-query"} <= {
        c.name for c in CONTEXTS
    }


def test_every_detector_is_exercised_by_the_corpus():
    found = {name for s in SECRETS for _, _, name in find_secrets(f" {s.text} ")}
    assert {d.name for d in DETECTORS} - found == set()


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_every_format_in_every_context_is_redacted_from_text(secret: FakeSecret):
    leaks = []
    for context in contexts_for(secret):
        text = context.wrap(secret.text)
        out = redact_text(text)
        if leaked(secret, out) or REDACTED not in out:
            leaks.append((context.name, out[:200]))
        if context.name in JSON_CONTEXTS:
            json.loads(out)  # still valid JSON
    assert leaks == []


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_every_format_in_every_context_is_redacted_from_decoded_json(secret: FakeSecret):
    leaks = []
    for context in contexts_for(secret):
        text = context.wrap(secret.text)
        decoded = json.loads(text) if context.name in JSON_CONTEXTS else text
        body = {"messages": [{"role": "user", "content": decoded}], "tags": [text], text: 1}
        out = json.dumps(redact_json(body))
        if leaked(secret, out):
            leaks.append((context.name, out[:200]))
    assert leaks == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("password", "correcthorse"),
        ("db_password", "Tr0ub4dor&3"),
        ("Authorization", "Token abcdef0123456789"),
        ("api_key", "0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
        ("client_secret", "vB8nM2qW3eR5tY7uI9oP1aS2"),
        ("X-Amz-Security-Token", "FwoGZXIvYXdzEJr0a1b2c3d4e5f6"),
    ],
)
def test_a_secret_named_key_loses_its_value_in_decoded_json(key: str, value: str):
    assert redact_json({"config": {key: value, "region": "eu"}}) == {
        "config": {key: REDACTED, "region": "eu"}
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("password", "${DB_PASSWORD}"),
        ("password", "string"),
        ("api_key", "os.environ"),
        ("max_tokens", "4096"),
        ("sort_key", "created_at"),
        ("token_count", "512"),
        ("cache_key", "9fceb02d0ae598e95dc970b74767f19372d61af8"),
    ],
)
def test_placeholders_and_ordinary_keys_keep_their_values(key: str, value: str):
    body = {key: value}
    assert redact_json(body) is body


def test_a_secret_used_as_a_key_is_redacted():
    key = SECRETS[0].text
    out = redact_json({key: {"n": 1}})
    assert out == {REDACTED: {"n": 1}}


@pytest.mark.parametrize("name_text", ORDINARY_TEXTS, ids=[n for n, _ in ORDINARY_TEXTS])
def test_ordinary_text_is_unchanged(name_text: tuple[str, str]):
    _, text = name_text
    assert find_secrets(text) == []
    assert redact_text(text) is text
    assert redact_text(json.dumps({"t": text})) == json.dumps({"t": text})
    body = {"system": text, "messages": [{"role": "user", "content": text}]}
    assert redact_json(body) is body


def ordinary_repository_files() -> list[Path]:
    """This repository's docs and source (not the redaction module, corpus and docs, which
    hold patterns and example secrets by design, nor tests and benchmarks, which give fake
    keys to SDK clients)."""
    files = [*REPO.glob("docs/**/*.md"), REPO / "README.md", *REPO.glob("*/*/README.md")]
    files += [*REPO.glob("core/src/memtap/**/*.py"), *REPO.glob("plugins/*/src/**/*.py")]
    files += [*REPO.glob("contrib/*/src/**/*.py")]
    skip = {"secrets.py", "redaction.py", "redaction.md"}
    redaction = REPO / "core/src/memtap/redact"
    return sorted(f for f in files if f.name not in skip and redaction not in f.parents and f.is_file())


def test_the_repository_docs_and_code_have_no_false_positive():
    false_positives = []
    for path in ordinary_repository_files():
        text = path.read_text(encoding="utf-8")
        false_positives += [(path.name, name, text[a:b]) for a, b, name in find_secrets(text)]
    assert false_positives == [], f"{len(false_positives)} false positive(s)"


def test_secrets_after_json_escapes_and_word_glue():
    key = next(s for s in SECRETS if s.name == "openai-project").text
    assert redact_text(f"line\\n{key}") == f"line\\n{REDACTED}"
    assert redact_text(f"\\u000b{key}") == f"\\u000b{REDACTED}"
    assert redact_text(f"%0A{key}") == f"%0A{REDACTED}"
    assert redact_text(f"\x1b[31m{key}") == f"\x1b[31m{REDACTED}"
    assert redact_text(f"task-{key[3:]}") == f"task-{key[3:]}"  # "sk-" inside a word is no key


def test_redacted_json_text_keeps_escapes_whole():
    # the password holds an escaped backslash, then an escaped quote ends the value
    text = json.dumps({"cmd": 'login --password Xk9\\vR2"mQ7 now'})
    out = redact_text(text)
    assert json.loads(out)["cmd"] == 'login --password [REDACTED]"mQ7 now'


json_values = st.recursive(
    st.text(max_size=30) | st.integers() | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(value=json_values, which=st.sampled_from(SECRETS), where=st.sampled_from(CONTEXTS))
def test_any_json_with_a_secret_stays_valid_and_loses_it(value: Any, which: FakeSecret, where: Any):
    if where.inline_only and not which.inline:
        return
    body = {"payload": value, "note": where.wrap(which.text)}
    text = json.dumps(body)
    out = redact_text(text)
    assert json.loads(out)["payload"] == json.loads(text)["payload"] or REDACTED in out
    assert not leaked(which, out)
    assert not leaked(which, json.dumps(redact_json(body)))


def test_redact_json_copies_only_what_changes():
    clean = {"a": ["x" * 300, {"b": "plain words only"}]}
    secret = SECRETS[1].text
    body = {"keep": clean, "leak": ["fine", f"my key {secret}"]}
    out = redact_json(body)
    assert out["keep"] is clean and out["leak"] == ["fine", f"my key {REDACTED}"]
    assert body["leak"][1].endswith(secret)  # the input is never changed
    assert redact_json(clean) is clean


def test_non_json_objects_are_converted_then_redacted():
    class Model:
        def __init__(self, text: str) -> None:
            self.text = text

    secret = SECRETS[0].text
    out = redact_json({"m": Model(secret)}, default=lambda o: {"text": o.text})
    assert out == {"m": {"text": REDACTED}}


def test_long_texts_are_scanned_once(monkeypatch: pytest.MonkeyPatch):
    calls = []
    scan = scanner._SCANNER.spans
    monkeypatch.setattr(scanner._SCANNER, "spans", lambda text: calls.append(len(text)) or scan(text))
    prompt = ORDINARY_TEXTS[0][1] * 50 + " unique-for-this-test"
    with_key = prompt + " " + SECRETS[3].text
    for _ in range(3):
        assert redact_text(prompt) is prompt
        assert redact_text(with_key).endswith(REDACTED)
        redact_json({"system": prompt, "messages": [{"content": with_key}]})
    assert [n for n in calls if n > 100] == [len(prompt), len(with_key)]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hunter2@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:hunter2@h/db?sslmode=require&password=s3cret", "postgresql://u:***@h/db?sslmode=require&password=***"),
        ("postgresql://h/db?sslpassword=x1y2&application_name=a", "postgresql://h/db?sslpassword=***&application_name=a"),
        ("https://api.example.com/v1?token=abc&page=2", "https://api.example.com/v1?token=***&page=2"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("duckdb:///var/lib/memtap.duckdb", "duckdb:///var/lib/memtap.duckdb"),
        ("memory://", "memory://"),
        ("https://alice@github.com/x.git", "https://alice@github.com/x.git"),
        ("postgresql://u:hunter2@[::1/db", "postgresql://***"),
    ],
)  # fmt: skip
def test_redact_url_masks_passwords_and_secret_parameters(url: str, shown: str):
    assert redact_url(url) == shown
    assert "hunter2" not in redact_url(url) and "s3cret" not in redact_url(url)


@pytest.mark.parametrize("form", ["text", "decoded"])
def test_a_spool_record_holds_no_secret_in_any_part(form: str, json_encoder: str):
    """The answer given as JSON text (the proxy's replayed form) or decoded (what the SDK
    taps give: ``to_json``'s mapping, an SDK model's events); written by either JSON
    encoder."""
    secrets = [s for s in SECRETS if s.inline][:12]
    joined = "\n".join(s.text for s in secrets)
    response: Any = {"choices": [{"message": {"content": joined}}]}
    events: list[Any] = [{"delta": s.text} for s in secrets]
    if form == "text":
        response, events = json.dumps(response), [json.dumps(e) for e in events]
    line = encode_record(
        call_id="c1",
        protocol="openai.chat",
        attribution=Attribution(entity_id="alice", session_id="s1"),
        started_at="2025-01-01T00:00:00+00:00",
        ended_at="2025-01-01T00:00:01+00:00",
        already_present=0,
        stream=True,
        error=f"APIError: rejected {secrets[0].text}",
        partial=False,
        body={"messages": [{"role": "user", "content": joined}], "password": "Tr0ub4dor&3"},
        response=response,
        events=events,
    )
    text = line.decode()
    record = json.loads(text)
    assert record["req"]["password"] == REDACTED and record["res"] and len(record["ev"]) == 12
    assert [s.name for s in secrets if leaked(s, text)] == []


def test_memtap_log_records_are_redacted(caplog: pytest.LogCaptureFixture):
    secret = SECRETS[4].text
    log = logging.getLogger("memtap.request.tap")
    with caplog.at_level(logging.DEBUG, logger="memtap"):
        log.warning("upstream rejected key %s", secret)
        try:
            raise ValueError(f"bad key {secret}")
        except ValueError:
            log.exception("failed")
    text = caplog.text
    assert REDACTED in text and secret not in text and not leaked(SECRETS[4], text)


@pytest.mark.parametrize("size", [1, 3, 7, 40])
def test_a_secret_a_stream_cut_into_pieces_is_redacted(size: int):
    key = next(s for s in SECRETS if s.name == "anthropic").text
    text = f"here it is: {key} and more"
    events = [
        json.dumps({"type": "content_block_delta", "index": 0, "delta": {"text": text[i : i + size]}})
        for i in range(0, len(text), size)
    ]
    events.append("not json " + key)
    out = redact_stream(events)
    joined = "".join(json.loads(e)["delta"]["text"] for e in out[:-1])
    assert joined == f"here it is: {REDACTED} and more"
    assert key not in "".join(out) and out[-1] == f"not json {REDACTED}"


def _stream_of(pieces: list[str]) -> list[str]:
    return [json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces]


def _streamed_text(events: list[str]) -> str:
    return "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in events)


def _redacted_stream(form: str, pieces: list[str]) -> list[str]:
    """The stream of ``pieces`` redacted as JSON texts (the proxy's and a replay's form) or
    decoded (an SDK's events as ``to_json`` returns them), as JSON texts; the decoded events
    given are checked unchanged (the capture writer reads them again)."""
    texts = _stream_of(pieces)
    if form == "text":
        return redact_stream(texts)
    events = [json.loads(t) for t in texts]
    out = redact_stream_events(events)
    assert [json.dumps(e) for e in events] == texts  # the caller's events are not changed
    return [json.dumps(e) for e in out]


@pytest.mark.parametrize("form", ["text", "decoded"])
@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_a_streamed_secret_is_redacted_wherever_the_pieces_fall(secret: FakeSecret, form: str):
    """Every secret, in each of its contexts, streamed: in a piece of its own after a word
    (joined, the word and the secret are one word, which no detector reads), cut in pieces
    of several sizes, and after pieces that end in a word's start; events given as JSON
    text or decoded."""
    leaks = []
    for context in contexts_for(secret):
        text = context.wrap(secret.text)
        ways = {"own piece after a word": ["Sure, here it is my", text, " done"]}
        for size in (3, 8, 21):
            ways[f"cut every {size}"] = ["ok: ", *[text[i : i + size] for i in range(0, len(text), size)]]
        ways["glued to the piece before"] = ["the key", text]
        for way, pieces in ways.items():
            out = _redacted_stream(form, pieces)
            if leaked(secret, "".join(out)) or leaked(secret, _streamed_text(out)):
                leaks.append(f"{context.name}: {way}")
    assert leaks == []


def test_decoded_events_come_back_as_they_are_unless_they_hold_a_secret():
    """Events without a secret are returned as the same objects (nothing copied); one with
    a secret comes back as a redacted copy; objects that are not JSON types are converted
    as the spool's encoder converts them, and scanned."""
    key = next(s for s in SECRETS if s.name == "anthropic").text
    clean = {"choices": [{"delta": {"content": "hello"}}], "model": "m"}
    split = [{"delta": {"text": "my key is " + key[:10]}}, {"delta": {"text": key[10:] + " ok"}}]
    foreign = {"when": datetime.date(2025, 1, 2), "pair": (1, 2), "note": f"key {key}"}
    out = redact_stream_events([clean, *split, foreign, f"text {key}"])
    assert out[0] is clean
    assert "".join(e["delta"]["text"] for e in out[1:3]) == f"my key is {REDACTED} ok"
    assert split[0]["delta"]["text"].endswith(key[:10])  # the given event is unchanged
    assert out[3] == {"when": "2025-01-02", "pair": [1, 2], "note": f"key {REDACTED}"}
    assert out[4] == f"text {REDACTED}"
    scalars: list[Any] = [None, 3, 1.5, True, clean]
    assert redact_stream_events(scalars) == scalars  # events that are JSON scalars pass as they are
    assert redact_stream_events([None, datetime.date(2025, 1, 2)]) == [None, "2025-01-02"]


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_a_secret_every_event_repeats_is_cut_from_each(secret: FakeSecret):
    """A string a stream repeats in every event (as it repeats its id, model and
    fingerprint) is scanned alone once, not once per event: a secret there is still cut
    from every event, in every context."""
    leaks = []
    for context in contexts_for(secret):
        text = context.wrap(secret.text)
        events = [{"id": text, "choices": [{"delta": {"content": p}}]} for p in ("a", "b", "c", "d")]
        out = redact_stream_events(events)
        for i, event in enumerate(out):
            if leaked(secret, json.dumps(event)):
                leaks.append(f"{context.name}: event {i}")
    assert leaks == []


def test_a_secret_that_only_repeated_pieces_make_is_redacted():
    """Identical pieces are scanned joined too: joined, these two (neither of which holds a
    key: 10 characters follow ``sk-``) make an OpenAI-style key of 20."""
    piece = "k9m2x7q4w1 sk-r8t3y6u5i0"
    assert find_secrets(piece) == []
    made = "sk-r8t3y6u5i0k9m2x7q4w1"
    assert [name for _, _, name in find_secrets(piece + piece)] == ["openai"]
    for form in ("text", "decoded"):
        text = _streamed_text(_redacted_stream(form, [piece, piece]))
        assert made not in text and REDACTED in text


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_a_stream_seen_clean_is_scanned_again_when_cut_another_way(secret: FakeSecret):
    """Stream pieces found clean are remembered by the pieces themselves, not their text:
    the same text streamed glued to a word (one word, which no detector reads) and then cut
    where the secret starts is redacted the second time; and a stream holding a secret is
    redacted every time it comes."""
    leaks = []
    for context in contexts_for(secret):
        text = context.wrap(secret.text)
        for _ in range(2):
            redact_stream(_stream_of(["ok: ", "the key" + text]))
        for attempt in range(2):
            out = redact_stream(_stream_of(["ok: ", "the key", text]))
            if leaked(secret, "".join(out)) or leaked(secret, _streamed_text(out)):
                leaks.append(f"{context.name}: attempt {attempt}")
    assert leaks == []


@pytest.mark.parametrize("secret", SECRETS, ids=[s.name for s in SECRETS])
def test_the_record_of_what_was_injected_holds_no_secret(secret: FakeSecret):
    """``Exchange.injected`` (memtap explain) is redacted like the messages: a secret in an
    injected history turn (text or tool arguments), in a block's text, or in a recalled or
    left-out fact's text, in every context, is not in the stored record."""
    from memtap.capture.explanation import Considered, RecallNote, injected_blocks
    from memtap.protocol.model import Fact, Message, ToolCall, injected_to_json
    from memtap.protocol.wire import InjectionPlan, SystemBlock

    leaks = []
    for context in contexts_for(secret):
        text = context.wrap(secret.text)
        fact = Fact(entity_id="alice", text=f"my note: {text}")
        plan = InjectionPlan(
            history=[
                Message("user", text, exchange_id="e1"),
                Message("assistant", "", tool_calls=[ToolCall("c1", "login", json.dumps({"a": text}))]),
            ],
            system_blocks=[
                SystemBlock(
                    text=f"Facts:\n- {text}",
                    source="recall",
                    note=RecallNote(
                        (Considered(fact, 0.5, {"words": 0.5}), Considered(fact, 0.01, {}, "threshold"))
                    ),
                ),
                SystemBlock(text=f"rules {text}", source="rules"),
            ],
        )
        out = json.dumps(injected_to_json(injected_blocks(plan)), ensure_ascii=False)
        if leaked(secret, out):
            leaks.append((context.name, out[:200]))
    assert leaks == []
