"""A long-running app keeps a bounded number of finished calls in memory.

Once a call is stored, nothing of it may stay reachable but what the session's history cache
keeps (its messages, bounded). A chain of references from each call to the one before it
(a resend count that reads the session, the pending history entry that formats the call)
keeps every call ever made alive: memory grows without bound, and every full garbage
collection walks all of it (on a small body, most of what memtap adds to a call). One suite
over the ways a call is made: history injected or off, JSON or stream, openai or anthropic,
one session or a new one every call. Real SDKs, local scripted server, DuckDB file.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from reliability_support import API_KEY

import memtap
from memtap.capture.writer import CapturedCall
from memtap.request.tap import Call
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import ScriptedModelServer

CALLS = 300
#: Finished calls that may still be reachable once the writer is idle (the last call's
#: locals, a session's few pending calls), far below ``CALLS``.
MAX_ALIVE = 30

_numbers = itertools.count()


def _openai_json(mem: memtap.Memory, server: ScriptedModelServer) -> Callable[[], Any]:
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    return lambda: client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"question {next(_numbers)}"}]
    )


def _openai_stream(mem: memtap.Memory, server: ScriptedModelServer) -> Callable[[], Any]:
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))

    def call() -> None:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"question {next(_numbers)}"}], stream=True
        )
        for _chunk in stream:
            pass

    return call


def _anthropic_json(mem: memtap.Memory, server: ScriptedModelServer) -> Callable[[], Any]:
    client = mem.register(
        anthropic.Anthropic(base_url=server.anthropic_base_url, api_key=API_KEY, max_retries=0)
    )
    return lambda: client.messages.create(
        model="m", max_tokens=64, messages=[{"role": "user", "content": f"question {next(_numbers)}"}]
    )


CLIENTS = {"openai-json": _openai_json, "openai-stream": _openai_stream, "anthropic-json": _anthropic_json}
HISTORY = {
    "history-injected": memtap.HistoryBudget(),
    "history-off": memtap.HistoryBudget(max_messages=0),
}


def _alive(kind: type, entity_id: str) -> int:
    """Objects of ``kind`` alive for calls of ``entity_id`` (not those of other tests, which
    a loaded machine may still be closing)."""
    collect_garbage()
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, kind) and getattr(o.attribution, "entity_id", None) == entity_id
    )


@pytest.mark.parametrize("new_session", [False, True], ids=["one-session", "new-session-each-call"])
@pytest.mark.parametrize("history", HISTORY)
@pytest.mark.parametrize("client", CLIENTS)
def test_finished_calls_are_not_kept(tmp_path: Path, client: str, history: str, new_session: bool) -> None:
    with ScriptedModelServer() as server:
        mem = memtap.Memory(f"duckdb:///{tmp_path / 'm.duckdb'}", history=HISTORY[history])
        try:
            call = CLIENTS[client](mem, server)
            entity = f"bounded-{client}-{history}-{new_session}"
            for number in range(CALLS):
                session = f"s{number}" if new_session else "one"
                with mem.scope(entity_id=entity, session_id=session):
                    call()
            assert mem.flush(60)
            calls, captured = _alive(Call, entity), _alive(CapturedCall, entity)
            stored = len(mem.history("one" if not new_session else f"s{CALLS - 1}", entity_id=entity))
        finally:
            mem.close()
    assert stored >= 2, "the calls were not stored"
    assert calls <= MAX_ALIVE, f"{calls} of {CALLS} finished calls are still in memory"
    if not new_session:
        # A session's history cache keeps the formatted exchanges of its latest calls until
        # it needs their messages (one per session it caches: with a new session every call,
        # one per call, up to its bound of sessions; the call itself is let go, above).
        assert captured <= MAX_ALIVE, f"{captured} of {CALLS} captured calls are still in memory"
