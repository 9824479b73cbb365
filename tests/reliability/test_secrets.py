"""No secret at rest: after calls with API keys in the client, in headers and in message
text, no key appears in any table of the store, in the spool files or in the spans."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import openai
import pytest
from reliability_stores import FaultyStore
from reliability_support import BACKENDS

import memtap
import memtap_openai
from memtap.redact import REDACTED
from memtap.testing.secrets import CONTEXTS, corpus_text, leaks, send_openai_chat_calls
from memtap.testing.secrets import SECRETS as CORPUS
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec

KEY = "sk-proj-SECRETkey0123456789abcdefXYZ"
HEADER_KEY = "sk-ant-api03-HEADERsecret0123456789abcd"
TEXT_KEYS = ["sk-live-TEXTsecret0123456789abcdefgh", "AKIAABCDEFGHIJKLMNOP", "ghp_" + "T" * 36]
SECRETS = [KEY, HEADER_KEY, *TEXT_KEYS]


def _dump_store(url: str) -> str:
    """Every row of every table, as text."""
    if url.startswith("duckdb:"):
        import duckdb

        with duckdb.connect(url.removeprefix("duckdb:///")) as conn:
            tables = [t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
            return "\n".join(str(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    import psycopg

    from memtap_postgres.urls import split_schema

    conninfo, schema = split_schema(url)
    with psycopg.connect(conninfo) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema]
            ).fetchall()
        ]
        return "\n".join(str(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)  # type: ignore[arg-type]


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_no_key_at_rest(
    store_url: str,
    server: ScriptedModelServer,
    tmp_path: Path,
    memtap_spans: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    spool_dir = tmp_path / "spool"
    inner = memtap.Memory(store_url).store  # opened through the plugin, as an app would
    store = FaultyStore(inner)
    mem = memtap.Memory(store, plugins=[memtap_openai], entry_points=False, spool=spool_dir)
    client = mem.register(
        openai.OpenAI(
            base_url=server.openai_base_url,
            api_key=KEY,
            max_retries=0,
            default_headers={"x-api-key": HEADER_KEY, "X-Custom-Auth": f"Bearer {HEADER_KEY}"},
        )
    )
    store.down.set()  # the first calls wait in the spool
    with mem.scope(entity_id="alice", session_id="s1"):
        for i, text_key in enumerate(TEXT_KEYS):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"my key {i} is {text_key}, keep it"}]
            )
            for _ in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"stream {text_key}"}], stream=True
            ):
                pass
    spooled = b"".join(p.read_bytes() for p in spool_dir.glob("*.jsonl"))
    assert spooled.count(b'"v":1') == 6
    for secret in SECRETS:
        assert secret.encode() not in spooled
    assert server.requests[-1].headers["authorization"] == f"Bearer {KEY}"  # the SDK sent it
    store.down.clear()
    assert mem.flush(30)
    mem.close()
    dump = _dump_store(store_url)
    assert "[REDACTED]" in dump and "keep it" in dump
    spans = memtap_spans.get_finished_spans()
    assert spans
    span_text = repr([(s.name, dict(s.attributes or {}), [e.attributes for e in s.events]) for s in spans])
    for secret in SECRETS:
        assert secret not in dump, f"{secret} stored"
        assert secret not in span_text, f"{secret} traced"


# -- the secrets corpus, end to end ----------------------------------------------------
#
# Every fake credential of memtap.testing.secrets, in several contexts, goes through the
# real openai and anthropic SDKs (chat, streams, tool calls, the Responses API), remember()
# and the memory tool; then the store file's bytes, every table, every byte ever written to
# the spool, `memtap export`, the spans (content capture on) and memtap's log records are
# searched: nothing may be found.

E2E_CONTEXTS = [c for c in CONTEXTS if c.name in {
    "after-space", "after-newline", "json-text", "tool-arguments-in-json", "double-quotes", "ansi-colour",
    "url-query", "after-equals",
}]  # fmt: skip


def _store_files_text(url: str) -> str:
    if not url.startswith("duckdb:"):
        return ""
    path = Path(url.removeprefix("duckdb:///"))
    return "".join(p.read_bytes().decode("latin-1") for p in path.parent.glob(path.name + "*"))


def _export(url: str) -> str:
    from click.testing import CliRunner

    from memtap.cli.main import main

    result = CliRunner().invoke(main, ["export", "--store", url, "-o", "-"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_secret_corpus_is_nowhere_at_rest_traced_or_logged(
    store_url: str,
    server: ScriptedModelServer,
    tmp_path: Path,
    memtap_spans: Any,
    memtap_spool_writes: list[bytes],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import anthropic

    import memtap_anthropic

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    caplog.set_level(logging.DEBUG, logger="memtap")
    spool_dir = tmp_path / "spool"
    store = FaultyStore(memtap.Memory(store_url).store)
    mem = memtap.Memory(store, plugins=[memtap_openai, memtap_anthropic], entry_points=False, spool=spool_dir)
    oai = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0))
    ant = mem.register(anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=KEY, max_retries=0))
    store.down.set()  # everything waits in the spool first: its files are searched as they are
    with mem.scope(entity_id="alice", session_id="corpus"):
        for context in E2E_CONTEXTS:
            text = corpus_text(context)
            send_openai_chat_calls(oai, server, text)
            oai.responses.create(model="m", instructions=text, input=text)
            ant.messages.create(
                model="c", max_tokens=64, system=text, messages=[{"role": "user", "content": text}]
            )
            with ant.messages.stream(
                model="c", max_tokens=64, messages=[{"role": "user", "content": text}]
            ) as s:
                for _ in s:
                    pass
            server.script(Reply(tool_calls=(ToolCallSpec(name="run", arguments=json.dumps({"cmd": text})),)))
            ant.messages.create(model="c", max_tokens=64, messages=[{"role": "user", "content": "go"}])
    on_disk = b"".join(p.read_bytes() for p in spool_dir.glob("*.jsonl")).decode()
    assert on_disk.count('"v":1') == 8 * len(E2E_CONTEXTS)
    assert leaks(on_disk) == []
    store.down.clear()
    short = [s for s in CORPUS if len(s.text) < 400]  # the tool takes one sentence
    for s in CORPUS:
        mem.remember(f"my {s.name} credential is {s.text}", entity_id="alice")
    for s in short:
        mem.handle_memory_tool({"fact": f"The user's {s.name} is {s.text}"}, entity_id="bob")
    assert mem.flush(60)
    facts = mem.facts(entity_id="alice") + mem.facts(entity_id="bob")
    remembered = [f.text for f in facts if f.kind == "fact"]  # (the user turns are episodes)
    assert len(remembered) == len(CORPUS) + len(short) and all(REDACTED in t for t in remembered)
    mem.close()
    assert server.requests and KEY in server.requests[-1].headers.get("x-api-key", KEY)
    places = {
        "spool writes": b"".join(memtap_spool_writes).decode(),
        "store files": _store_files_text(store_url),
        "store tables": _dump_store(store_url),
        "export": _export(store_url),
        "spans": repr(
            [(s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events])
             for s in memtap_spans.get_finished_spans()]
        ),
        "logs": "\n".join(
            r.getMessage() + (r.exc_text or "") for r in caplog.records if r.name.startswith("memtap")
        ),
    }  # fmt: skip
    assert "[REDACTED]" in places["store tables"] and "[REDACTED]" in places["export"]
    assert {where: leaks(text) for where, text in places.items()} == {where: [] for where in places}
