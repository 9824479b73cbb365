"""Memorize through `memtap.LiteLLMPort` pointed at an OpenAI-compatible endpoint (the
scripted server standing in for a local model server)."""

from __future__ import annotations

import json

import memtap
from memtap.protocol.model import Attribution, Exchange, Message
from memtap.storage.store import InMemoryStore
from memtap.testing.server import Reply


def test_memorize_with_a_local_openai_compatible_endpoint(server) -> None:
    answer = {"memories": [{"op": "ADD", "text": "The user lives in Tokyo."}]}
    server.script(Reply(text=json.dumps(answer)))
    port = memtap.LiteLLMPort("openai/local-model", base_url=server.openai_base_url, api_key="sk-local-0000")
    mem = memtap.Memory(InMemoryStore(), llm=port, entry_points=False, embedder=False)
    exchange = Exchange(
        attribution=Attribution(entity_id="alice", session_id="s1"),
        provider="t",
        operation="chat",
        input=[Message("user", "I live in Tokyo")],
        output=[Message("assistant", "Nice!")],
    )
    mem.longterm.memorizer.submit([exchange])
    assert mem.flush()
    assert [f.text for f in mem.facts(entity_id="alice")] == ["The user lives in Tokyo."]
    request = server.requests[-1]
    assert request.path.endswith("/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-local-0000"
    body = request.json
    assert body["model"] == "local-model" and body["response_format"] == {"type": "json_object"}
    assert "I live in Tokyo" in body["messages"][0]["content"]
    mem.close()
