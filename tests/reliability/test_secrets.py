"""No secret at rest: after calls with API keys in the client, in headers and in message
text, no key appears in any table of the store, in the spool files or in the spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from reliability_stores import FaultyStore
from reliability_support import BACKENDS

import memtap
import memtap_openai
from memtap.testing.server import ScriptedModelServer

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
