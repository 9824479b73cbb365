"""The JSON the spool writes: :func:`memtap.protocol.json_encoder.encode_json` writes, with pydantic-core's
encoder (installed with every provider SDK) as with the standard library's (the proxy
alone), compact JSON that decodes to the same data, strings written byte for byte alike
(numbers may be spelt otherwise: ``1.5e-7``, ``1.5e-07``); the kept encodings of long
strings join into the same line with either; and a record is redacted in one scan and
encoded in one piece."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtap import redact
from memtap.capture.spool import encode_record
from memtap.protocol.model import Attribution
from memtap.redact import REDACTED, compact_encoder, dumps, dumps_redacted, encode_json, scanner


def _stdlib(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _decoded(data: bytes) -> Any:
    return json.loads(data, parse_constant=lambda name: f"<{name}>")  # so that NaN equals NaN


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)  # no lone surrogates
_SCALARS = st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats() | _TEXT
_STRINGS = st.recursive(
    _TEXT | st.none() | st.booleans(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_either_encoder_writes_json_that_decodes_to_the_same_data(value: Any) -> None:
    import pydantic_core

    expected = _decoded(_stdlib(value))
    assert _decoded(pydantic_core.to_json(value, fallback=str)) == expected
    assert _decoded(encode_json(value)) == expected
    assert _decoded(compact_encoder().encode(value).encode()) == expected


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_STRINGS)
def test_strings_structures_and_constants_are_written_byte_for_byte_alike(value: Any) -> None:
    import pydantic_core

    assert pydantic_core.to_json(value, fallback=str) == _stdlib(value)


def test_escapes_and_numbers_are_written_alike(json_encoder: str) -> None:
    value = {
        "controls": "\x00\x1f\x7f\u2028\u2029",
        "quotes": '"\\/',
        "unicode": "é漢字🙂",
        "numbers": [0, -0.0, 1e16, 1.5e-7, 10**25, float("nan"), float("inf")],
        "tuple": (1, 2),
    }
    assert _decoded(encode_json(value)) == _decoded(_stdlib(value))


def test_what_the_fast_encoder_refuses_the_standard_library_writes(json_encoder: str) -> None:
    """pydantic-core stops at a depth the standard library still writes; objects that are
    not JSON types go to ``default``; a lone surrogate neither can write as UTF-8."""
    deep: list[Any] = []
    for _ in range(600):
        deep = [deep]
    assert encode_json(deep) == _stdlib(deep)
    assert encode_json({"when": object()}, default=lambda o: "converted") == b'{"when":"converted"}'
    with pytest.raises(UnicodeEncodeError):
        encode_json({"s": "a\ud800b"})


def test_long_strings_kept_encoded_join_into_the_same_line(json_encoder: str) -> None:
    """A body's long strings are encoded once and kept; the line made with them (either
    encoder writes the placeholders' NUL the same way) is the line encoded whole."""
    long_text = 'system prompt with "quotes", \\ and \n lines ' * 60
    body = {"messages": [{"role": "system", "content": long_text}, {"role": "user", "content": "hi"}]}
    body["tools"] = [{"description": long_text + "tool"}, long_text]
    for _ in range(2):  # encoded, then from the kept encodings
        assert dumps_redacted(body) == _stdlib(body)


def _small_record(stream: bool, content: str = "What is the capital of Peru?") -> dict[str, Any]:
    answer = {"id": "chatcmpl-1", "model": "m", "object": "chat.completion.chunk"}
    return dict(
        call_id="c1",
        protocol="openai.chat",
        attribution=Attribution(entity_id="alice", session_id="s1"),
        started_at="2025-01-01T00:00:00+00:00",
        ended_at="2025-01-01T00:00:01+00:00",
        already_present=0,
        stream=stream,
        error=None,
        partial=False,
        body={"model": "m", "messages": [{"role": "user", "content": content}]},
        response=None if stream else {**answer, "choices": [{"message": {"content": "Lima, of course."}}]},
        events=[{**answer, "choices": [{"delta": {"content": p}}]} for p in ("Lima", ", of", " course.")]
        if stream
        else None,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_small_record_is_scanned_in_one_pass_and_encoded_once(
    monkeypatch: pytest.MonkeyPatch, json_encoder: str, stream: bool
) -> None:
    """The journal of a small call gathers the new strings of its body and its response
    and scans them in one pass (a stream's pieces, joined by place, in one more), and
    encodes the record in one piece: what it costs the request does not grow with how many
    parts a record has."""
    scans: list[str] = []
    encodes: list[Any] = []
    spans, encode = scanner._SCANNER.spans, dumps.encode_json
    monkeypatch.setattr(scanner._SCANNER, "spans", lambda text: scans.append(text) or spans(text))
    monkeypatch.setattr(
        dumps, "encode_json", lambda obj, default=None: encodes.append(obj) or encode(obj, default)
    )
    redact.clear_cache()
    line = encode_record(**_small_record(stream, content="a question never asked before, 42"))
    assert len(scans) == (2 if stream else 1) and len(encodes) == 1
    record = json.loads(line)
    assert record["req"]["messages"][0]["content"] == "a question never asked before, 42"
    if stream:
        answer = "".join(e["choices"][0]["delta"]["content"] for e in record["ev"])
    else:
        answer = record["res"]["choices"][0]["message"]["content"]
    assert answer == "Lima, of course."


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_small_record_redacts_each_part(json_encoder: str, stream: bool) -> None:
    key = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"
    record = _small_record(stream, content=f"my key is {key}")
    record["body"]["password"] = "Tr0ub4dor&3"
    if stream:
        record["events"][1]["choices"][0]["delta"]["content"] = " " + key[:9]
        record["events"][2]["choices"][0]["delta"]["content"] = key[9:] + " ok"
    else:
        record["response"]["choices"][0]["message"]["content"] = f"it is {key}"
    line = encode_record(**record)
    assert key not in line.decode() and key[9:] not in line.decode()
    data = json.loads(line)
    assert data["req"]["password"] == REDACTED
    assert data["req"]["messages"][0]["content"] == f"my key is {REDACTED}"
    if stream:
        assert "".join(e["choices"][0]["delta"]["content"] for e in data["ev"]) == f"Lima {REDACTED} ok"
    else:
        assert data["res"]["choices"][0]["message"]["content"] == f"it is {REDACTED}"
