"""Faults: the store down or slow, hooks raising, a full disk under the spool. Every user
call succeeds, and each outcome is counted in memtap's OpenTelemetry counters."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import openai
import pytest
from reliability_stores import FaultyStore
from reliability_support import API_KEY, total

import memtap
import memtap_openai
from memtap import hookimpl
from memtap.capture import spool
from memtap.testing.server import ScriptedModelServer
from memtap_duckdb.store import DuckDBStore


def _mem(store: Any, tmp_path: Path, *plugins: object) -> memtap.Memory:
    return memtap.Memory(
        store, plugins=[memtap_openai, *plugins], entry_points=False, spool=tmp_path / "spool"
    )


def _client(mem: memtap.Memory, server: ScriptedModelServer) -> openai.OpenAI:
    return mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


def _calls(client: openai.OpenAI, n: int, prefix: str = "q") -> None:
    for i in range(n):
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"{prefix}{i}"}]
        )
        assert reply.choices[0].message.content == f"You said: {prefix}{i}"
        with client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"{prefix}s{i}"}], stream=True
        ) as stream:
            assert (
                "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
                == f"You said: {prefix}s{i}"
            )


def test_store_down_from_the_start(
    server: ScriptedModelServer, tmp_path: Path, counters: Callable[[], dict]
) -> None:
    store = FaultyStore(DuckDBStore(tmp_path / "m.duckdb"))
    store.down.set()
    mem = _mem(store, tmp_path)
    _calls(_client(mem, server), 10)
    # The writer batches (it lingers before writing): let it meet the outage before it ends.
    # Wait for the counted failure, not the first failed write: a write that fails and whose
    # halves go through once the store is back is not a failure, and ending the outage
    # between the two made this test flaky under load.
    deadline = time.monotonic() + 10
    while not counters().get(("memtap.failures", "store_write")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mem.writer.stats.write_failures >= 1
    store.down.clear()
    assert mem.flush(30)
    assert store.inner.stats()["exchanges"] == 20
    delta = counters()
    assert delta[("memtap.exchanges.captured", None)] == 20
    assert delta[("memtap.exchanges.spooled", None)] == 20
    assert delta[("memtap.exchanges.stored", None)] == 20
    assert delta[("memtap.failures", "store_write")] >= 1
    mem.close()


def test_store_slow(server: ScriptedModelServer, tmp_path: Path, counters: Callable[[], dict]) -> None:
    store = FaultyStore(DuckDBStore(tmp_path / "m.duckdb"))
    mem = _mem(store, tmp_path)
    client = _client(mem, server)
    _calls(client, 1, "warm")  # history of the default session is cached now
    assert mem.flush(30)
    store.delay = 0.2
    started = time.perf_counter()
    _calls(client, 5)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"writes of a slow store slowed the calls down: {elapsed:.2f}s for 10 calls"
    assert mem.flush(30)
    assert store.inner.stats()["exchanges"] == 12
    assert counters()[("memtap.exchanges.stored", None)] == 12
    mem.close()


class RaisingInjector:
    @hookimpl
    def memtap_request_injections(self, request: Any) -> None:
        raise RuntimeError("injector bug")


class RaisingFormatter:
    @hookimpl(wrapper=True)
    def memtap_format_exchange(self, raw: Any) -> Generator[None, Any, Any]:
        result = yield
        if "boom" in str(raw.request_body):
            raise RuntimeError("formatter bug")
        return result


def test_hooks_raising(server: ScriptedModelServer, tmp_path: Path, counters: Callable[[], dict]) -> None:
    store = DuckDBStore(tmp_path / "m.duckdb")
    mem = _mem(store, tmp_path, RaisingInjector(), RaisingFormatter())
    client = _client(mem, server)
    _calls(client, 3)
    _calls(client, 2, "boom")
    assert mem.flush(30)
    assert store.stats()["exchanges"] == 6  # the 4 "boom" calls could not be formatted
    delta = counters()
    assert delta[("memtap.failures", "inject")] == 10
    assert delta[("memtap.failures", "format")] == 4
    assert mem.spool is not None and mem.spool.pending() == 0  # given up, not replayed forever
    mem.close()


def test_disk_full_under_the_spool(
    server: ScriptedModelServer, tmp_path: Path, counters: Callable[[], dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    store = DuckDBStore(tmp_path / "m.duckdb")
    mem = _mem(store, tmp_path)
    client = _client(mem, server)
    monkeypatch.setattr(spool, "_write", full)
    _calls(client, 5)
    monkeypatch.undo()
    _calls(client, 1, "after")
    assert mem.flush(30)
    assert store.stats()["exchanges"] == 12  # stored from memory all the same
    delta = counters()
    assert delta[("memtap.failures", "spool_write")] == 10
    assert delta[("memtap.exchanges.spooled", None)] == 2
    assert total(delta, "memtap.exchanges.stored") == 12
    mem.close()


def test_short_write_is_cut_off_so_later_records_stay_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    sp = spool.Spool(tmp_path / "spool")
    assert sp.append(b'{"v":1,"id":"a"}\n') is not None

    def half(fd: int, data: bytes) -> int:
        return os.write(fd, data[: len(data) // 2])

    monkeypatch.setattr(spool, "_write", half)
    assert sp.append(b'{"v":1,"id":"b","x":"yyyyyyyyyyyy"}\n') is None
    monkeypatch.undo()
    assert sp.append(b'{"v":1,"id":"c"}\n') is not None
    (path,) = (tmp_path / "spool").glob("*.jsonl")
    assert path.read_bytes() == b'{"v":1,"id":"a"}\n{"v":1,"id":"c"}\n'
    sp.close()


class RaisingEmbedder:
    name = "raising-embedder"

    def embed(self, texts: Any) -> Any:
        raise RuntimeError("embedder down")


def test_embedder_raising(server: ScriptedModelServer, tmp_path: Path, counters: Callable[[], dict]) -> None:
    import inspect

    if "embedder" not in inspect.signature(memtap.Memory).parameters:
        pytest.skip("memtap.Memory has no embedder option yet (recall work in progress)")
    store = DuckDBStore(tmp_path / "m.duckdb")
    mem = memtap.Memory(
        store,
        plugins=[memtap_openai],
        entry_points=False,
        spool=tmp_path / "spool",
        embedder=RaisingEmbedder(),
    )
    client = _client(mem, server)
    _calls(client, 3)
    mem.remember("Alice adopted a beagle", entity_id="alice")
    assert [s.text for s in mem.recall("beagle", entity_id="alice")] == ["Alice adopted a beagle"]
    assert mem.flush(30)
    assert store.stats()["exchanges"] == 6
    deadline = time.monotonic() + 10  # the embedding worker counts in the background
    while counters().get(("memtap.failures", "embed"), 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert counters()[("memtap.failures", "embed")] >= 1
    mem.close()
