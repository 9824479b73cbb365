"""memtap-google's reader of ``streamGenerateContent`` answers sent without ``alt=sse``
(one JSON array, streamed): every element handed back once, whole, however the bytes are
cut, and read by the protocol's own stream accumulator."""

from __future__ import annotations

import json

import pytest

from memtap_google import GenerateContentProtocol, JSONArrayStream


def chunk(text: str, finish: bool = False) -> dict:
    candidate: dict = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = "STOP"
    out: dict = {"candidates": [candidate], "modelVersion": "gemini-x"}
    if finish:
        out["usageMetadata"] = {"promptTokenCount": 4, "candidatesTokenCount": 3}
    return out


#: Texts that a naive splitter would cut wrongly: brackets, braces, quotes and backslashes
#: inside strings, multi-byte characters.
TRICKY = ['he said "}]" then {', "a\\\\", 'back\\slash \\"quoted\\" [x]', "東京 👋 ünïcode", ""]
CHUNKS = [chunk(t) for t in TRICKY] + [chunk("end", finish=True)]


def google_body(chunks: list[dict]) -> bytes:
    """The array as the Gemini API writes it (pretty-printed elements, CRLF separators)."""
    elements = (json.dumps(c, indent=2, ensure_ascii=False).encode() for c in chunks)
    return b"[" + b"\r\n,\r\n".join(elements) + b"]"


def read(body: bytes, size: int) -> tuple[list[str], bool]:
    reader = JSONArrayStream()
    got: list[str] = []
    for at in range(0, len(body), size):
        got += reader.feed(body[at : at + size])
    got += reader.close()
    return got, reader.done


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 10_000])
def test_every_element_comes_back_once_whatever_the_cuts(size: int) -> None:
    got, done = read(google_body(CHUNKS), size)
    assert [json.loads(t) for t in got] == CHUNKS
    assert done


def test_an_element_is_handed_back_as_soon_as_it_is_complete() -> None:
    reader = JSONArrayStream()
    first, second = (json.dumps(c).encode() for c in CHUNKS[:2])
    assert reader.feed(b"[" + first[:-1]) == []
    assert [json.loads(t) for t in reader.feed(first[-1:] + b"\r\n,\r\n" + second[:5])] == [CHUNKS[0]]
    assert not reader.done
    assert [json.loads(t) for t in reader.feed(second[5:] + b"]")] == [CHUNKS[1]]
    assert reader.done
    assert reader.feed(b"trailing bytes") == []


def test_an_element_cut_by_the_end_of_the_body_is_left_out() -> None:
    body = google_body(CHUNKS)
    cut = body.index(b"\r\n,\r\n", body.index(b"\r\n,\r\n") + 1) + 20  # inside the third element
    got, done = read(body[:cut], 5)
    assert [json.loads(t) for t in got] == CHUNKS[:2]
    assert not done


def test_empty_arrays_single_objects_and_scalars() -> None:
    assert read(b"[]", 1) == ([], True)
    assert read(b"  [ \r\n ]", 1) == ([], True)
    error = {"error": {"code": 400, "message": "bad [request] {x}", "status": "INVALID_ARGUMENT"}}
    got, done = read(json.dumps(error).encode(), 3)
    assert [json.loads(t) for t in got] == [error] and done
    got, done = read(b'[1, "two ]", {"a": [1, {"b": "}"}]}, [3]]', 2)
    assert [json.loads(t) for t in got] == [{"a": [1, {"b": "}"}]}, [3]] and done


def test_the_elements_feed_the_protocols_stream_accumulator() -> None:
    protocol = GenerateContentProtocol()
    accumulator = protocol.new_accumulator()
    reader = protocol.new_array_stream()
    body = google_body(CHUNKS)
    for at in range(0, len(body), 11):
        for text in reader.feed(body[at : at + 11]):
            accumulator.feed(json.loads(text))
    result = accumulator.result()
    assert [m.content for m in result.messages] == ["".join(TRICKY) + "end"]
    assert list(result.finish_reasons) == ["STOP"]
    assert (result.usage.input_tokens, result.usage.output_tokens, result.model) == (4, 3, "gemini-x")
