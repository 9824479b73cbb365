"""The last line of defence: a request the provider rejects because of what memtap put in
it is sent again as the application built it. Counted (``memtap.failures``, reason
``rejected``), logged once per protocol, traced on the call's span; the app's result is
the one a bare client would have got."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

import memtap
import memtap_duckdb
import memtap_openai
from memtap.request import tap as tap_module
from memtap.testing.server import Reply, ScriptedModelServer


def test_every_rejection_is_counted_and_logged_once(
    server: ScriptedModelServer,
    tmp_path: Path,
    counters: Callable[[], dict],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tap_module, "_REJECTED_PROTOCOLS", set())
    caplog.set_level(logging.WARNING, logger="memtap")
    mem = memtap.Memory(
        f"duckdb:///{tmp_path / 'm.duckdb'}", plugins=[memtap_openai, memtap_duckdb], entry_points=False
    )
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-resend", max_retries=0))
    with mem.scope(entity_id="ada", session_id="resend"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "my name is Ada"}])
        for i in range(3):
            server.script(Reply(status=400, text=f"messages[1]: invalid ({i})"))
            reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
            assert reply.choices[0].message.content == f"You said: q{i}"
    assert counters()[("memtap.failures", "rejected")] == 3
    warnings = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(warnings) == 1
    assert "openai.chat" in warnings[0] and "HTTP 400" in warnings[0] and "invalid (0)" in warnings[0]
    assert len(mem.history("resend", entity_id="ada")) == 8
    mem.close()


def test_a_bad_request_error_the_app_made_itself_is_raised_unchanged(
    server: ScriptedModelServer, tmp_path: Path, counters: Callable[[], dict]
) -> None:
    """When the re-sent request (the app's own) fails too, the app sees that error, as it
    would without memtap; the failed call is not stored."""
    mem = memtap.Memory(
        f"duckdb:///{tmp_path / 'm.duckdb'}", plugins=[memtap_openai, memtap_duckdb], entry_points=False
    )
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-resend", max_retries=0))
    with mem.scope(entity_id="ada", session_id="both-rejected"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
        server.script(Reply(status=400, text="first"), Reply(status=400, text="the app's own mistake"))
        with pytest.raises(openai.BadRequestError, match="the app's own mistake") as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "bad"}])
    # Not chained to memtap's rejected attempt (the SDK chains its own httpx error).
    assert not isinstance(caught.value.__context__, openai.APIStatusError)
    assert [m["content"] for m in server.last_json()["messages"]] == ["bad"]
    assert counters()[("memtap.failures", "rejected")] == 1
    assert len(mem.history("both-rejected", entity_id="ada")) == 2
    mem.close()
