"""Every MCP tool answers within a deadline, through the MCP client SDK (in-process): a store
that stops answering gives each tool an error saying to try again at the deadline, not a
hang, and no more than two stuck calls per tool are started; `recall` on an entity of 20,000
facts imported a moment ago (no vectors, a slow embedder) answers by words in seconds,
`loading` while its index is read."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp import Client

import memtap
import memtap_mcp.server
from memtap import Fact
from memtap.storage.store import InMemoryStore
from memtap_mcp.server import EntityRules, build_server


class FrozenStore(InMemoryStore):
    """A store whose reads and writes block until ``thaw`` is set (a frozen connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.thaw = threading.Event()
        self.frozen = threading.Event()
        self.entered = 0

    def _wait(self) -> None:
        if self.frozen.is_set():
            self.entered += 1
            self.thaw.wait(60)

    def facts(self, *args: Any, **kwargs: Any) -> Any:
        self._wait()
        return super().facts(*args, **kwargs)

    def history(self, *args: Any, **kwargs: Any) -> Any:
        self._wait()
        return super().history(*args, **kwargs)

    def add_facts(self, *args: Any, **kwargs: Any) -> Any:
        self._wait()
        return super().add_facts(*args, **kwargs)

    def indexable_facts(self, *args: Any, **kwargs: Any) -> Any:
        self._wait()
        return super().indexable_facts(*args, **kwargs)


def test_every_tool_answers_within_the_deadline_when_the_store_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memtap_mcp.server, "TOOL_DEADLINE", 0.5)
    store = FrozenStore()
    mem = memtap.Memory(store, spool=False, embedder=False, episodes=False)
    mem.remember("Alice's cat is called Miso", entity_id="alice")
    mem.flush()
    store.frozen.set()
    calls = {
        "remember": {"text": "Alice drinks oolong tea"},
        "recall": {"query": "cat", "entity_id": "carol"},  # not loaded yet: its load hangs
        "history": {"session_id": "s1"},
        "forget": {"fact_id": "nope"},
    }

    async def main() -> dict[str, list[tuple[bool, float, str]]]:
        seen: dict[str, list[tuple[bool, float, str]]] = {}
        async with Client(build_server(mem, EntityRules("bob"))) as client:
            for tool, args in calls.items():
                for _ in range(4):
                    started = time.monotonic()
                    result = await client.call_tool(tool, args)
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    seen.setdefault(tool, []).append((result.is_error, time.monotonic() - started, text))
        return seen

    try:
        seen = anyio.run(main)
    finally:
        store.thaw.set()
        mem.close()
    for tool, answers in seen.items():
        assert all(error for error, _, _ in answers), (tool, answers)
        assert all(took < 3.0 for _, took, _ in answers), (tool, answers)
        assert all("try again" in text for _, _, text in answers), (tool, answers)
    assert store.entered <= 2 * len(calls)  # two stuck calls a tool at most were started


class SlowEmbedder:
    """A model that costs 2 ms a text (20,000 facts: 40 s), and whose vectors say nothing:
    every fact's is orthogonal to every question's. How many facts it has embedded when
    recall answers depends on the host's load; with vectors that meant something by chance
    (they once hung on the text's length) an embedded fact without the word could outrank
    the ones with it, and the test failed now and then."""

    name = "slow-test-embedder"

    def embed(self, texts: Sequence[str]) -> Any:
        time.sleep(0.002 * len(texts))  # the model's compute time
        rows = [[1.0, 0.0, 0.0] if text.startswith("fact ") else [0.0, 1.0, 0.0] for text in texts]
        return np.array(rows, dtype=np.float32)


def test_recall_on_20000_just_imported_facts_answers_by_words(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'big.duckdb'}"
    importer = memtap.Memory(url, spool=False, embedder=False)
    words = ["garden", "tulips", "bicycle", "kyoto", "violin", "coffee", "marathon", "python"]
    importer.store.add_facts(
        [Fact(entity_id="big", text=f"fact {i}: likes {words[i % 8]} number {i}") for i in range(20_000)]
    )
    importer.close()
    mem = memtap.Memory(url, spool=False, embedder=SlowEmbedder())  # type: ignore[arg-type]

    async def main() -> tuple[list[float], dict[str, Any]]:
        times = []
        async with Client(build_server(mem, EntityRules("big"))) as client:
            give_up = time.monotonic() + 120
            while True:  # the client asks again while the index loads
                started = time.monotonic()
                result = await client.call_tool("recall", {"query": "violin", "k": 3})
                times.append(time.monotonic() - started)
                assert not result.is_error, result.content
                found = result.structured_content
                if not found["loading"] or time.monotonic() > give_up:
                    return times, found

    try:
        times, found = anyio.run(main)
    finally:
        mem.close()
    assert not found["loading"]
    assert [f["text"].split(":")[1].split()[1] for f in found["facts"]] == ["violin"] * 3
    assert max(times) < 2.0, times
