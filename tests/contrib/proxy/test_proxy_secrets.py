"""No secret at rest through the proxy: the secrets corpus (memtap.testing.secrets) sent by
real SDK clients and raw HTTP through the proxy, in requests (system, user text, tool
calls, tool results) and in the upstream's answers (JSON and SSE, tool calls), is found in
none of: every byte written to the spool, the store file and tables, `memtap export`, the
spans and memtap's log records. The credentials in the headers go upstream only."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import openai
import pytest
from click.testing import CliRunner
from proxy_support import HAS_ANTHROPIC, provider_plugins

import memtap
from memtap.cli.main import main as memtap_cli
from memtap.testing.secrets import CONTEXTS, SECRETS, corpus_text, leaked, leaks, send_openai_chat_calls
from memtap.testing.server import ScriptedModelServer
from memtap_duckdb.store import DuckDBStore
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

KEY = "sk-proj-PROXYsecretKEY0123456789abcdefXYZ"
USED = {"after-space", "after-newline", "json-text", "tool-arguments-in-json", "url-query"}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "proxy.duckdb"


@pytest.fixture
def secret_proxy(upstream: ScriptedModelServer, db_path: Path, tmp_path: Path) -> Iterator[ProxyThread]:
    memory = memtap.Memory(
        DuckDBStore(db_path), plugins=provider_plugins(), entry_points=False, spool=tmp_path / "spool"
    )
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, memory)) as thread:
        yield thread
    memory.close()


def test_secret_corpus_through_the_proxy_is_nowhere_at_rest(
    secret_proxy: ProxyThread,
    upstream: ScriptedModelServer,
    db_path: Path,
    memtap_spool_writes: list[bytes],
    memtap_spans: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    caplog.set_level(logging.DEBUG, logger="memtap")
    oai = openai.OpenAI(base_url=secret_proxy.url + "/v1", api_key=KEY, max_retries=0)
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "x-memtap-session": "secrets"}
    calls = 0
    with httpx.Client(base_url=secret_proxy.url, timeout=30) as http:
        for context in [c for c in CONTEXTS if c.name in USED]:
            text = corpus_text(context)
            calls += send_openai_chat_calls(oai, upstream, text)
            if HAS_ANTHROPIC:
                body = {
                    "model": "c",
                    "max_tokens": 64,
                    "system": text,
                    "messages": [{"role": "user", "content": text}],
                }
                assert http.post("/v1/messages", json=body, headers=headers).status_code == 200
                with http.stream("POST", "/v1/messages", json={**body, "stream": True}, headers=headers) as r:
                    r.read()
                calls += 2
    mem = secret_proxy.proxy.memory
    assert mem.flush(60)
    assert mem.stats()["exchanges"] == calls
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" or r.headers.get("x-api-key") == KEY
               for r in upstream.requests)  # fmt: skip
    mem.close()
    with duckdb.connect(str(db_path)) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        dump = "\n".join(str(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    exported = CliRunner().invoke(memtap_cli, ["export", "--store", f"duckdb:///{db_path}", "-o", "-"])
    assert exported.exit_code == 0, exported.output
    places = {
        "spool writes": b"".join(memtap_spool_writes).decode(),
        "store file": "".join(p.read_bytes().decode("latin-1") for p in db_path.parent.glob("proxy.duckdb*")),
        "store tables": dump,
        "export": exported.output,
        "spans": repr([(dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events])
                       for s in memtap_spans.get_finished_spans()]),
        "logs": "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records
                          if r.name.startswith("memtap")),
    }  # fmt: skip
    assert len(memtap_spool_writes) == calls and "[REDACTED]" in dump
    assert {where: leaks(text) for where, text in places.items()} == {where: [] for where in places}
    assert {where: KEY in text for where, text in places.items()} == {where: False for where in places}


def test_a_secret_in_the_entity_and_session_headers_is_stored_as_a_fingerprint(
    secret_proxy: ProxyThread, upstream: ScriptedModelServer, db_path: Path, memtap_spool_writes: list[bytes]
) -> None:
    """``x-memtap-entity: user-ghp_…`` and ``x-memtap-session``: the ids are stored with a
    fingerprint in place of the secret (docs/security.md), and the CLI finds the session by
    the id the agent sent."""
    ids = [
        s
        for s in SECRETS
        if s.name in {"github-classic", "openai-project", "slack-bot", "jwt", "stripe-live"}
    ]
    with httpx.Client(base_url=secret_proxy.url, timeout=30) as http:
        for i, secret in enumerate(ids):
            headers = {
                "authorization": f"Bearer {KEY}",
                "x-memtap-entity": f"user-{secret.text}",
                "x-memtap-session": f"s-{secret.text}",
            }
            body = {"model": "m", "messages": [{"role": "user", "content": f"turn {i}"}]}
            assert http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
    mem = secret_proxy.proxy.memory
    assert mem.flush(60)
    assert len({s.entity_id for s in mem.sessions(limit=100)}) == len(ids)
    mem.close()
    runner = CliRunner()
    for i, secret in enumerate(ids):
        shown = runner.invoke(
            memtap_cli,
            [
                "history",
                f"s-{secret.text}",
                "--entity",
                f"user-{secret.text}",
                "--store",
                f"duckdb:///{db_path}",
            ],
        )
        assert shown.exit_code == 0 and f"turn {i}" in shown.output, shown.output
    with duckdb.connect(str(db_path)) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        dump = "\n".join(str(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    at_rest = dump + b"".join(memtap_spool_writes).decode() + db_path.read_bytes().decode("latin-1")
    assert [s.name for s in ids if leaked(s, at_rest)] == []
