"""The proxy's way of capturing (``Memory(format_in_caller=True)``) with a real openai client."""

from __future__ import annotations

import threading

import openai

import memtap
import memtap_openai
from memtap.capture.writer import CapturedCall
from memtap.storage.store import InMemoryStore
from memtap.testing.server import ScriptedModelServer


def test_a_tap_formatting_in_the_caller_formats_before_queueing():
    mem = memtap.Memory(
        InMemoryStore(), entry_points=False, plugins=[memtap_openai], spool=False, format_in_caller=True
    )
    assert mem.tap.writer.format_in_caller is True
    threads: list[str] = []
    original = mem.tap.writer.submit

    def submit(item: CapturedCall) -> None:
        threads.append(threading.current_thread().name)
        assert item._done  # formatted by the caller, before the writer sees it
        original(item)

    mem.tap.writer.submit = submit  # type: ignore[method-assign]
    with ScriptedModelServer() as server:
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test"))
        with mem.scope(entity_id="alice", session_id="s"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert threads == [threading.current_thread().name]
    assert mem.flush(5)
    assert [m.content for m in mem.history(entity_id="alice", session_id="s")] == ["hi", "You said: hi"]
    mem.close()
