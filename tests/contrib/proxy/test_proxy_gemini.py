"""Google's Gemini API through the proxy, with the real google-genai SDK pointed at it
(``http_options={"base_url": proxy}``) and raw HTTP: ``generateContent`` and
``streamGenerateContent`` are injected into and captured through memtap-google's wire
protocol, JSON-array streams (no ``alt=sse``) too; ``countTokens`` and model lists pass through; the API key
(header or ``?key=``) goes upstream only; a request routed nowhere sensible is logged once
with what to configure."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest
from proxy_support import make_memory, settle

import memtap
import memtap_agents
import memtap_google
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec
from memtap_duckdb.store import DuckDBStore
from memtap_proxy import Proxy, ProxyConfig, ProxyThread
from memtap_proxy.routing import route

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")

KEY = "AIzaSyPROXYsecretGEMINIkey0123456789abc"
MODEL = "gemini-2.5-flash"
GENERATE = f"/v1beta/models/{MODEL}:generateContent"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent"


@pytest.fixture
def gmem() -> Iterator[memtap.Memory]:
    memory = make_memory(plugins=[memtap_google, memtap_agents])
    yield memory
    memory.close()


def gemini_proxy(upstream: ScriptedModelServer, memory: memtap.Memory, **settings: Any) -> ProxyThread:
    settings = {"openai_upstream": upstream.base_url, "gemini_upstream": upstream.base_url, **settings}
    config = ProxyConfig(session_id="default", **settings)
    return ProxyThread(Proxy(config, memory))


@pytest.fixture
def gproxy(upstream: ScriptedModelServer, gmem: memtap.Memory) -> Iterator[ProxyThread]:
    with gemini_proxy(upstream, gmem) as thread:
        yield thread


def client_for(base_url: str) -> Any:
    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=base_url))


def model_calls(upstream: ScriptedModelServer) -> list[Any]:
    return [
        r for r in upstream.requests if r.method == "POST" and ":" in r.path and "countTokens" not in r.path
    ]


def history(mem: memtap.Memory, session: str = "default") -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in mem.history(session)]


# -- routing ------------------------------------------------------------------------------

ROUTES = [
    # (method, path, query, family, protocol, model, mode)
    ("POST", GENERATE, b"", "gemini", "google.generate_content", MODEL, "json"),
    ("POST", STREAM, b"alt=sse", "gemini", "google.generate_content", MODEL, "sse"),
    ("POST", STREAM, b"key=abc&alt=sse", "gemini", "google.generate_content", MODEL, "sse"),
    ("POST", STREAM, b"", "gemini", "google.generate_content", MODEL, "array"),
    (
        "POST",
        f"/v1alpha/models/{MODEL}:generateContent",
        b"",
        "gemini",
        "google.generate_content",
        MODEL,
        "json",
    ),
    ("POST", f"/v1/models/{MODEL}:generateContent", b"", "gemini", "google.generate_content", MODEL, "json"),
    (
        "POST",
        "/v1beta/tunedModels/mine:generateContent",
        b"",
        "gemini",
        "google.generate_content",
        "mine",
        "json",
    ),
    ("POST", f"/v1beta/models/{MODEL}:countTokens", b"", "gemini", None, MODEL, None),
    ("POST", f"/v1beta/models/{MODEL}:embedContent", b"", "gemini", None, MODEL, None),
    ("GET", "/v1beta/models", b"", "gemini", None, None, None),
    ("GET", f"/v1beta/models/{MODEL}", b"", "gemini", None, None, None),
    ("GET", GENERATE, b"", "gemini", None, MODEL, None),
    ("POST", "/upload/v1beta/files", b"", "gemini", None, None, None),
    ("POST", "/v1beta/cachedContents", b"", "gemini", None, None, None),
    # OpenAI's and Anthropic's routes are theirs still
    ("GET", "/v1/models", b"", "openai", None, None, None),
    ("GET", "/v1/models/ft:gpt-4o:acme::abc123", b"", "openai", None, None, None),
    ("DELETE", "/v1/models/ft:davinci", b"", "openai", None, None, None),
    ("GET", "/v1/models", b"key=abc", "gemini", None, None, None),
    ("GET", "/v1/models/gemini-2.5-pro", b"pageSize=5&key=abc", "gemini", None, None, None),
    ("POST", "/v1/chat/completions", b"", "openai", "openai.chat", None, None),
    ("POST", "/v1/messages", b"", "anthropic", "anthropic.messages", None, None),
]


@pytest.mark.parametrize(("method", "path", "query", "family", "protocol", "model", "mode"), ROUTES)
@pytest.mark.parametrize("prefix", ["", "/gemini-cli"])
def test_gemini_paths_route_to_the_gemini_upstream(
    method: str,
    path: str,
    query: bytes,
    family: str,
    protocol: str | None,
    model: str | None,
    mode: str | None,
    prefix: str,
) -> None:
    r = route(method, prefix + path, [], {"gemini-cli", "codex"}, ("openai", "anthropic"), query)
    assert (r.family, r.protocol, r.model, r.mode, r.path) == (family, protocol, model, mode, path)
    assert r.agent == ("gemini-cli" if prefix else None)
    assert not r.guessed


def test_the_gemini_upstream_defaults_to_google() -> None:
    assert ProxyConfig().upstream("gemini") == "https://generativelanguage.googleapis.com"
    assert ProxyConfig(gemini_upstream="http://127.0.0.1:9/").upstream("gemini") == "http://127.0.0.1:9"
    assert ProxyConfig(gemini_upstream="").upstream("gemini") is None


# -- the real SDK through the proxy --------------------------------------------------------


def test_generate_content_is_forwarded_byte_for_byte_then_gets_history(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    # The same SDK call straight to the upstream: the bytes the proxy must forward.
    direct = client_for(upstream.base_url)
    direct.models.generate_content(model=MODEL, contents="I am Alice and I live in Tokyo.")
    expected = upstream.requests[-1]
    upstream.clear()

    client = client_for(gproxy.url)
    upstream.script(Reply(text="Hello Alice"))
    answer = client.models.generate_content(model=MODEL, contents="I am Alice and I live in Tokyo.")
    assert answer.text == "Hello Alice"
    first = upstream.requests[-1]
    assert (first.path, first.query, first.body) == (expected.path, expected.query, expected.body)
    assert first.headers["x-goog-api-key"] == KEY

    client.models.generate_content(
        model=MODEL,
        contents="Where do I live?",
        config=types.GenerateContentConfig(system_instruction="Be brief."),
    )
    sent = upstream.last_json()
    assert "model" not in sent  # the URL names the model; memtap's record of it is not sent
    assert [(c["role"], c["parts"][0]["text"]) for c in sent["contents"]] == [
        ("user", "I am Alice and I live in Tokyo."),
        ("model", "Hello Alice"),
        ("user", "Where do I live?"),
    ]
    assert sent["systemInstruction"]["parts"][0]["text"] == "Be brief."
    settle(gmem, 2)
    assert history(gmem) == [
        ("user", "I am Alice and I live in Tokyo."),
        ("assistant", "Hello Alice"),
        ("user", "Where do I live?"),
        ("assistant", "You said: Where do I live?"),
    ]
    exchanges = gmem.exchanges(session_id="default")
    assert {(e.provider, e.request_model, e.response_model) for e in exchanges} == {
        ("gcp.gemini", MODEL, MODEL)
    }


def test_stream_generate_content_is_relayed_and_captured(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    client = client_for(gproxy.url)
    upstream.script(Reply(text="streamed from gemini", chunks=4))
    chunks = list(client.models.generate_content_stream(model=MODEL, contents="stream please"))
    assert "".join(c.text or "" for c in chunks) == "streamed from gemini"
    assert len(chunks) == 4
    assert upstream.requests[-1].query == "alt=sse"
    settle(gmem, 1)
    assert history(gmem) == [("user", "stream please"), ("assistant", "streamed from gemini")]


def test_async_client_stream(gproxy: ProxyThread, upstream: ScriptedModelServer, gmem) -> None:
    client = client_for(gproxy.url)
    upstream.script(Reply(text="async answer", chunks=2))

    async def read() -> list[str | None]:
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="async hello")
        return [chunk.text async for chunk in stream]

    assert "".join(t or "" for t in asyncio.run(read())) == "async answer"
    settle(gmem, 1)
    assert history(gmem)[-1] == ("assistant", "async answer")


def test_count_tokens_and_model_lists_pass_through(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem
) -> None:
    client = client_for(gproxy.url)
    assert client.models.count_tokens(model=MODEL, contents="one two three").total_tokens == 3
    listed = [m.name for m in client.models.list()]
    assert listed == ["models/gemini-2.5-flash", "models/gemini-2.5-pro"]
    assert client.models.get(model=MODEL).name == f"models/{MODEL}"
    # google-genai 3.x calls /v1/..., Gemini CLI /v1beta/...: either is Gemini's
    assert [(r.method, re.sub(r"^/v1\w*/", "/", r.path)) for r in upstream.requests] == [
        ("POST", f"/models/{MODEL}:countTokens"),
        ("GET", "/models"),
        ("GET", f"/models/{MODEL}"),
    ]
    assert all(r.headers["x-goog-api-key"] == KEY for r in upstream.requests)
    gmem.flush()
    assert gmem.sessions(entity_id=None) == []


def array_call(url: str, text: str, *, history: list[dict[str, Any]] = ()) -> tuple[bytes, list[bytes]]:
    """``streamGenerateContent`` without ``alt=sse`` (the REST API's JSON-array stream), read
    as it streams: the whole body, and the pieces it came in."""
    body = json.dumps({"contents": [*history, {"role": "user", "parts": [{"text": text}]}]})
    with httpx.stream("POST", url + STREAM, content=body, headers={"x-goog-api-key": KEY}) as r:
        assert r.status_code == 200
        pieces = list(r.iter_raw())
    return b"".join(pieces), pieces


def test_a_json_array_stream_is_relayed_as_it_comes_then_stored(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    upstream.script(Reply(text="array answer from gemini", chunks=3))
    direct, _ = array_call(upstream.base_url, "array please")
    upstream.clear()
    upstream.script(Reply(text="array answer from gemini", chunks=3))
    proxied, _ = array_call(gproxy.url, "array please")
    # Relayed byte for byte (the upstream writes one element per chunk, as Google does)
    same_ids = re.compile(rb'"responseId":"scripted\d+"')
    assert same_ids.sub(b"", proxied) == same_ids.sub(b"", direct)
    texts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in json.loads(proxied)]
    assert "".join(texts) == "array answer from gemini"
    assert upstream.requests[-1].query == ""
    settle(gmem, 1)
    assert history(gmem) == [("user", "array please"), ("assistant", "array answer from gemini")]
    e = gmem.exchanges(session_id="default")[0]
    assert (e.provider, e.request_model, e.response_model, e.stream) == ("gcp.gemini", MODEL, MODEL, True)


def test_a_json_array_stream_gets_the_session_history(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    upstream.script(Reply(text="Hello Alice"))
    array_call(gproxy.url, "I am Alice and I live in Tokyo.")
    settle(gmem, 1)
    array_call(gproxy.url, "Where do I live?")
    sent = upstream.last_json()
    assert "model" not in sent
    assert [(c["role"], c["parts"][0]["text"]) for c in sent["contents"]] == [
        ("user", "I am Alice and I live in Tokyo."),
        ("model", "Hello Alice"),
        ("user", "Where do I live?"),
    ]
    settle(gmem, 2)
    assert history(gmem)[-2:] == [("user", "Where do I live?"), ("assistant", "You said: Where do I live?")]


def test_an_error_answer_to_a_json_array_stream_is_relayed_and_nothing_stored(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    upstream.script(Reply(status=429, text="quota exceeded"))
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "too many"}]}]})
    r = httpx.post(gproxy.url + STREAM, content=body, headers={"x-goog-api-key": KEY})
    assert r.status_code == 429
    assert r.json()["error"]["message"] == "quota exceeded"
    gmem.flush()
    assert gmem.exchanges(session_id="default") == []


def test_a_json_array_stream_cut_by_the_upstream_keeps_what_came(
    gproxy: ProxyThread, upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    upstream.script(Reply(text="abcdefgh", chunks=4, truncate_stream_after=2))  # "ab", "cd", ...
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "cut me"}]}]})
    with (
        pytest.raises(httpx.HTTPError),
        httpx.stream("POST", gproxy.url + STREAM, content=body, headers={"x-goog-api-key": KEY}) as r,
    ):
        r.read()
    settle(gmem, 1)
    stored = gmem.exchanges(session_id="default")
    assert len(stored) == 1 and stored[0].error is not None
    assert history(gmem) == [("user", "cut me"), ("assistant", "abcd")]  # the two elements that came


@pytest.mark.parametrize("stream", [False, True])
def test_mem_status_is_answered_by_the_proxy(
    gproxy: ProxyThread, upstream: ScriptedModelServer, stream: bool
) -> None:
    client = client_for(gproxy.url)
    if stream:
        text = "".join(
            c.text or "" for c in client.models.generate_content_stream(model=MODEL, contents="mem:status")
        )
    else:
        text = client.models.generate_content(model=MODEL, contents="mem:status").text or ""
    assert "memtap proxy: store" in text
    assert "protocol google.generate_content, agent profile generic" in text
    assert upstream.requests == []


def test_an_upstream_error_reaches_the_sdk_as_googles(
    gproxy: ProxyThread, upstream: ScriptedModelServer
) -> None:
    upstream.script(Reply(status=429, text="quota exhausted"))
    client = client_for(gproxy.url)
    with pytest.raises(genai.errors.ClientError) as raised:
        client.models.generate_content(model=MODEL, contents="hi")
    assert raised.value.code == 429
    assert "quota exhausted" in str(raised.value)


# -- the key goes upstream only ------------------------------------------------------------


def test_the_api_key_goes_upstream_and_is_never_stored_or_logged(
    upstream: ScriptedModelServer,
    tmp_path: Path,
    memtap_spool_writes: list[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="memtap")
    db = tmp_path / "gemini.duckdb"
    memory = memtap.Memory(
        DuckDBStore(db), plugins=[memtap_google], entry_points=False, spool=tmp_path / "spool"
    )
    try:
        with gemini_proxy(upstream, memory) as thread:
            client = client_for(thread.url)
            client.models.generate_content(model=MODEL, contents="remember the blue door")
            list(client.models.generate_content_stream(model=MODEL, contents="and the red one"))
            body = {"contents": [{"role": "user", "parts": [{"text": "key in the query"}]}]}
            by_query = httpx.post(f"{thread.url}{GENERATE}?key={KEY}", json=body)
            assert by_query.status_code == 200
            assert upstream.requests[-1].query == f"key={KEY}"
            assert all(KEY in (r.headers.get("x-goog-api-key", "") + r.query) for r in upstream.requests)
            settle(memory, 3)
    finally:
        memory.close()
    assert [m.content for m in DuckDBStore(db).history("default")][::2] == [
        "remember the blue door",
        "and the red one",
        "key in the query",
    ]
    assert memtap_spool_writes and not any(KEY.encode() in w for w in memtap_spool_writes)
    assert KEY.encode() not in db.read_bytes()
    with duckdb.connect(str(db), read_only=True) as conn:
        tables = [t for (t,) in conn.execute("select table_name from information_schema.tables").fetchall()]
        for table in tables:
            assert KEY not in json.dumps(conn.execute(f'select * from "{table}"').fetchall(), default=str)
    assert KEY not in caplog.text


# -- routed nowhere sensible ---------------------------------------------------------------


def test_a_request_matching_no_route_is_logged_once_with_what_to_configure(
    gproxy: ProxyThread, upstream: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memtap")
    for _ in range(3):
        assert httpx.post(gproxy.url + "/api/generate", json={"prompt": "hi"}).status_code == 404
    warnings = [r.getMessage() for r in caplog.records if "matches no API route" in r.getMessage()]
    assert len(warnings) == 1
    assert "POST /api/generate" in warnings[0]
    assert "--gemini-upstream" in warnings[0] and "--openai-upstream" in warnings[0]
    assert upstream.requests[-1].path == "/api/generate"  # still forwarded, as before


def test_gemini_without_an_upstream_gets_a_google_error_naming_the_flag(
    upstream: ScriptedModelServer, gmem: memtap.Memory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="memtap")
    with gemini_proxy(upstream, gmem, gemini_upstream=None) as thread:
        client = client_for(thread.url)
        for _ in range(2):
            with pytest.raises(genai.errors.ServerError) as raised:
                client.models.generate_content(model=MODEL, contents="hi")
            assert raised.value.code == 502
            assert "--gemini-upstream" in str(raised.value)
    assert upstream.requests == []
    logged = [r.getMessage() for r in caplog.records if "no gemini upstream" in r.getMessage()]
    assert len(logged) == 1 and "--gemini-upstream" in logged[0]


# -- Gemini CLI's recorded requests (tests/agents/record_golden.py) --------------------------

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> tuple[dict[str, str], bytes]:
    headers = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    return {**headers, "x-goog-api-key": KEY}, (GOLDEN / f"{name}.json").read_bytes()


def test_gemini_cli_side_call_is_passed_through_byte_for_byte_and_not_stored(
    upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    gmem.remember("The user's favourite colour is teal.", entity_id="default")
    with ProxyThread(Proxy(ProxyConfig(gemini_upstream=upstream.base_url), gmem)) as thread:
        proxy = thread.proxy
        headers, body = golden("gemini_cli_router")
        upstream.script(Reply(text='{"complexity_reasoning": "simple", "complexity_score": 10}'))
        r = httpx.post(
            f"{thread.url}/v1beta/models/gemini-3.5-flash-lite:generateContent", content=body, headers=headers
        )
        assert r.status_code == 200
        assert upstream.requests[-1].body == body
        assert proxy.stats.side_calls == 1
        # the turn itself is Gemini CLI's and gets memory
        headers, body = golden("gemini_cli_first")
        upstream.script(Reply(text="It says Fridays."))
        r = httpx.post(f"{thread.url}{STREAM}?alt=sse", content=body, headers=headers)
        assert r.status_code == 200
        assert proxy.stats.side_calls == 1
        settle(gmem, 1)
    sessions = gmem.sessions(entity_id="default")
    assert len(sessions) == 1 and sessions[0].session_id.startswith("conv-")
    assert history(gmem, sessions[0].session_id) == [
        ("user", "Read notes.txt and tell me what it says."),
        ("assistant", "It says Fridays."),
    ]


def test_gemini_cli_resumed_session_is_the_same_and_nothing_is_stored_twice(
    upstream: ScriptedModelServer, gmem: memtap.Memory
) -> None:
    resumed = json.loads(golden("gemini_cli_resume")[1])
    call = resumed["contents"][1]["parts"][0]["functionCall"]
    upstream.script(Reply(tool_calls=[ToolCallSpec(call["name"], json.dumps(call["args"]))]))
    upstream.script(
        Reply(text=resumed["contents"][3]["parts"][0]["text"]), Reply(text="You asked me to read it.")
    )
    with ProxyThread(Proxy(ProxyConfig(gemini_upstream=upstream.base_url), gmem)) as thread:
        headers, first = golden("gemini_cli_first")
        url = f"{thread.url}{STREAM}?alt=sse"
        assert httpx.post(url, content=first, headers=headers).status_code == 200
        # the tool's answer, as Gemini CLI sends it (its made-up call id), then the resumed turn
        answered = {**resumed["contents"][2], "parts": resumed["contents"][2]["parts"][:1]}
        after_tool = {**resumed, "contents": [*resumed["contents"][:2], answered]}
        assert httpx.post(url, content=json.dumps(after_tool), headers=headers).status_code == 200
        assert httpx.post(url, content=golden("gemini_cli_resume")[1], headers=headers).status_code == 200
        settle(gmem, 3)
    [session] = gmem.sessions(entity_id="default")
    assert [(m.role, m.content[:24], m.tool_call_id) for m in gmem.history(session.session_id)] == [
        ("user", "Read notes.txt and tell ", None),
        ("assistant", "", None),
        ("tool", '{"output": "The deploy k', "read_file"),
        ("assistant", "It says the deploy key r", None),
        ("user", "What did I ask you first", None),
        ("assistant", "You asked me to read it.", None),
    ]
