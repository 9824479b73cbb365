"""The spool of Gemini calls: what is journaled is the response's JSON (what the capture
writer reads), so a call replayed after a crash is stored whole; and the response (or each
streamed chunk) is converted once, for the journal and the writer alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import memtap
import memtap_google
from memtap.capture.spool import Spool
from memtap.storage.store import InMemoryStore
from memtap_google import adapter

MODEL = "gemini-2.0-flash"


@pytest.fixture
def spooled(tmp_path: Path) -> Iterator[memtap.Memory]:
    spool = tmp_path / "spool"
    memory = memtap.Memory(InMemoryStore(), plugins=[memtap_google], entry_points=False, spool=spool)
    yield memory
    memory.close()


def _call(client: Any, text: str, stream: bool) -> list[Any]:
    models = client.models
    if stream:
        return list(models.generate_content_stream(model=MODEL, contents=text))
    return [models.generate_content(model=MODEL, contents=text)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_journaled_call_replayed_after_a_crash_is_stored_whole(
    new_client: Callable[[], Any],
    spooled: memtap.Memory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    """The record a live call journals, left unstored (the process died), is replayed by the
    next process into the exchange the live call stored: the answer included (the journal
    once held the SDK's HTTP wrapper, headers and body text, which no reader understands)."""
    lines: list[bytes] = []
    real_append = Spool.append
    monkeypatch.setattr(Spool, "append", lambda self, line: lines.append(line) or real_append(self, line))
    client = spooled.register(new_client())
    with spooled.scope(entity_id="alice", session_id="s1"):
        _call(client, "hello there", stream)
        assert spooled.flush()
    (live,) = spooled.store.exchanges()
    (line,) = lines
    left = Spool(tmp_path / "left")
    left.append(line)
    left.close()  # unstored: the next process replays it
    nxt = memtap.Memory(InMemoryStore(), plugins=[memtap_google], entry_points=False, spool=tmp_path / "left")
    try:
        assert nxt.flush(10)
        (replayed,) = nxt.store.exchanges()
    finally:
        nxt.close()
    assert [(m.role, m.content) for m in replayed.messages] == [(m.role, m.content) for m in live.messages]
    assert replayed.output and replayed.output[-1].content == "You said: hello there"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_journal_and_the_writer_share_one_conversion(
    new_client: Callable[[], Any], spooled: memtap.Memory, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    assert spooled.spool is not None
    converted: list[object] = []
    real = adapter.body_json
    monkeypatch.setattr(adapter, "body_json", lambda r: converted.append(r) or real(r))
    client = spooled.register(new_client())
    with spooled.scope(entity_id="alice", session_id="s1"):
        chunks = _call(client, "hello there", stream)
        assert spooled.flush()
    assert len(converted) == len(chunks) and len({id(c) for c in converted}) == len(chunks)
    (stored,) = spooled.store.exchanges()
    assert stored.input[-1].content == "hello there"
    assert stored.output[-1].content == "You said: hello there"
