"""Concurrency through registered openai clients: many threads, many asyncio tasks, several
processes. Every exchange is stored exactly once, nothing fails, and no request carries
another scope's history."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import openai
import pytest
from reliability_support import API_KEY, BACKENDS

import memtap
from memtap.testing.server import ScriptedModelServer

try:  # openai 3 ships its own fork of httpx
    import httpx2 as httpx_module
except ImportError:  # pragma: no cover
    import httpx as httpx_module  # type: ignore[no-redef]

THREADS, PER_THREAD = 32, 500
TASKS = 1000


def _marker(entity: str, session: str) -> str:
    return f"<{entity}|{session}>"


def _markers(text: str) -> set[tuple[str, str]]:
    """The (entity, session) markers in a text, plain (``<e|s>``) or escaped as memtap's
    memory block escapes stored text (``&lt;e|s&gt;``)."""
    found = re.findall(r"(?:<|&lt;)([\w-]+)\|([\w-]+)(?:>|&gt;)", text)
    return {(e, s) for e, s in found}


def _check_no_crossing(server: ScriptedModelServer) -> int:
    """Every recorded request carries only its own scope's history; the long-term memory
    block (recall, across the entity's sessions) only its own entity's facts."""
    checked = 0
    for request in server.requests:
        body = request.json
        if not body or "messages" not in body:
            continue
        messages = body["messages"]
        (own,) = _markers(str(messages[-1].get("content")))
        for message in messages:
            text = str(message.get("content"))
            if "<memtap-memory>" in text:
                entities = {e for e, _ in _markers(text)}
                assert entities <= {own[0]}, f"recall crossed entities: {text!r} in a request of {own}"
            else:
                assert _markers(text) <= {own}, f"history crossed scopes: {text!r} in a request of {own}"
        checked += 1
    return checked


def _assert_stored_once(mem: memtap.Memory, scopes: dict[tuple[str, str], int]) -> None:
    assert mem.flush(120)
    stats = mem.store.stats()
    calls = sum(scopes.values())
    assert stats["exchanges"] == calls
    ids = [ex.id for ex in mem.store.exchanges()]
    assert len(ids) == len(set(ids)) == calls
    for (entity, session), n in scopes.items():
        history = mem.store.history(session, entity_id=entity)
        assert len(history) == 2 * n
        marker = _marker(entity, session)
        assert all(marker in m.content for m in history), f"foreign message in {entity}/{session}"


@pytest.mark.slow
@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_32_threads_x_500_calls(
    store_url: str, server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    mem = memtap.Memory(store_url, history=memtap.HistoryBudget(max_messages=6))
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        entity, session = f"e{t % 8}", f"s{t}"
        marker = _marker(entity, session)
        start.wait()
        try:
            with mem.scope(entity_id=entity, session_id=session):
                for i in range(PER_THREAD):
                    reply = client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"{marker} turn {i}"}]
                    )
                    assert reply.choices[0].message.content == f"You said: {marker} turn {i}"
        except BaseException as exc:  # reported below
            errors.append(exc)

    with caplog.at_level(logging.ERROR, logger="memtap"):
        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors[:3]
        _assert_stored_once(mem, {(f"e{t % 8}", f"s{t}"): PER_THREAD for t in range(THREADS)})
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert _check_no_crossing(server) == THREADS * PER_THREAD
    mem.close()


@pytest.mark.slow
@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_1000_concurrent_asyncio_calls(
    store_url: str, server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    mem = memtap.Memory(store_url, history=memtap.HistoryBudget(max_messages=6))

    async def main() -> None:
        # 1,000 tasks in flight at once; the connection pool (64) queues them, as an app's
        # would (waiting for a connection counts against the pool timeout: make it generous).
        http = openai.DefaultAsyncHttpxClient(
            limits=httpx_module.Limits(max_connections=64), timeout=httpx_module.Timeout(120.0)
        )
        client = mem.register(
            openai.AsyncOpenAI(
                base_url=server.openai_base_url, api_key=API_KEY, max_retries=0, http_client=http, timeout=120
            )
        )

        async def one(i: int) -> None:
            entity, session = f"e{i % 10}", f"s{i % 50}"
            marker = _marker(entity, session)
            with mem.scope(entity_id=entity, session_id=session):
                if i % 5 == 0:
                    stream = await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"{marker} {i}"}], stream=True
                    )
                    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
                else:
                    reply = await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"{marker} {i}"}]
                    )
                    text = reply.choices[0].message.content or ""
            assert text == f"You said: {marker} {i}"

        await asyncio.gather(*(one(i) for i in range(TASKS)))
        await client.close()

    with caplog.at_level(logging.ERROR, logger="memtap"):
        asyncio.run(main())
        scopes: dict[tuple[str, str], int] = {}
        for i in range(TASKS):
            key = (f"e{i % 10}", f"s{i % 50}")
            scopes[key] = scopes.get(key, 0) + 1
        _assert_stored_once(mem, scopes)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert _check_no_crossing(server) == TASKS
    mem.close()


_PROCESS = """
import sys, threading, openai, memtap
url, base, proc = sys.argv[1], sys.argv[2], int(sys.argv[3])
mem = memtap.Memory(url, history=memtap.HistoryBudget(max_messages=6))
client = mem.register(openai.OpenAI(base_url=base, api_key="sk-test-0123456789abcdefghijkl", max_retries=0))
def work(t):
    entity, session = f"p{proc}e{t % 2}", f"p{proc}s{t}"
    marker = f"<{entity}|{session}>"
    with mem.scope(entity_id=entity, session_id=session):
        for i in range(100):
            msgs = [{"role": "user", "content": f"{marker} {i}"}]
            r = client.chat.completions.create(model="m", messages=msgs)
            assert r.choices[0].message.content == f"You said: {marker} {i}"
threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
assert mem.flush(120)
mem.close()
print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_4_processes_on_postgresql(store_url: str, server: ScriptedModelServer, tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS, store_url, server.openai_base_url, str(p)],
            env={**os.environ, "MEMTAP_HOME": str(tmp_path / f"home{p}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(4)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "ok", err[-2000:]
        assert "Traceback" not in err and "could not store" not in err, err[-2000:]
    with memtap.Memory(store_url) as mem:
        _assert_stored_once(mem, {(f"p{p}e{t % 2}", f"p{p}s{t}"): 100 for p in range(4) for t in range(4)})
    assert _check_no_crossing(server) == 4 * 4 * 100
