"""What memtap injected into each call, recorded with the exchange and read back by
``Memory.explain``: a registered openai client against the local scripted server. The
record is what was on the wire (history turns, the recall block's text and facts with the
scores ``Memory.recall`` gives, their parts), what recall left out and why, and it fails
open."""

from __future__ import annotations

import json
import math
import time

import openai
import pytest
from openai_support import API_KEY, user

import memtap
import memtap_openai
from memtap.formats.blocks import OPEN_TAG, escape_memory_text
from memtap.longterm.recall_injector import RecallBudget
from memtap.storage.store import InMemoryStore


class WordEmbedder:
    """Deterministic toy vectors: dog words share one dimension."""

    name = "toy-v1"

    def embed(self, texts):
        return [[float(any(w in t.lower() for w in ("dog", "beagle", "puppy"))), 0.1] for t in texts]


def make(store, **kw):
    kw.setdefault("embedder", WordEmbedder())
    kw.setdefault("episodes", False)
    return memtap.Memory(store, plugins=[memtap_openai], entry_points=False, **kw)


def client_for(mem, server):
    return mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))


def system_text(server) -> str:
    return "\n".join(m["content"] for m in server.last_json()["messages"] if m["role"] == "system")


def ask(client, mem, server, text, **scope):
    """Ask until the recall block is on the wire (a cold entity's first call loads its
    index in the background and injects nothing); the last exchange's id."""
    for _ in range(50):
        with mem.scope(**scope):
            client.chat.completions.create(model="m", messages=[user(text)])
        if OPEN_TAG in system_text(server):
            break
        time.sleep(0.02)
    else:
        pytest.fail("recalled facts never injected")
    mem.flush()
    return mem.exchanges(session_id=scope["session_id"], entity_id=scope["entity_id"])[-1].id


def test_a_call_is_explained_as_it_was_sent(server):
    # (On a DuckDB file: tests/integration/test_explain_cli.py; every backend: the storage suite.)
    # The threshold sits between the two facts that answer (a word match and a meaning match,
    # ~0.18 and ~0.56 with the toy vectors) and the weak one (~0.07).
    # A generous deadline: the query vector must arrive on a loaded machine too.
    mem = make(InMemoryStore(), recall=RecallBudget(k=2, min_score=0.1, deadline=10.0))
    try:
        client = client_for(mem, server)
        # Before any fact exists: nothing can be recalled into the first call (with the toy
        # vectors "Hello there" is as close to every fact without a dog as can be, so a
        # fact indexed in time would be).
        with mem.scope(entity_id="alice", session_id="s1"):
            client.chat.completions.create(model="m", messages=[user("Hello there")])
        mem.flush()
        (first,) = mem.exchanges(session_id="s1")
        tokyo = mem.remember("Alice lives in Tokyo near the river", entity_id="alice")
        dog = mem.remember("Alice has a beagle named Mochi", entity_id="alice")
        weak = mem.remember("Alice once visited a museum in Tokyo", entity_id="alice")
        mem.longterm.engine.flush()  # their vectors made (in the background: late on a loaded host)
        exchange_id = ask(
            client,
            mem,
            server,
            "Where does Alice live, does she have a dog?",
            entity_id="alice",
            session_id="s1",
        )
        sent = system_text(server)
        explanation = mem.explain(exchange_id)
        assert explanation is not None
        assert explanation.exchange.id == exchange_id
        assert explanation.exchange.input[0].content.startswith("Where does Alice live")
        kinds = [b.kind for b in explanation.blocks]
        assert kinds == ["history", "recall"]
        history, recall = explanation.blocks

        # History: the turns of the first call, naming the exchange they came from.
        assert [(m.role, m.content, m.exchange_id) for m in history.turns] == [
            (m.role, m.content, first.id) for m in first.messages
        ]
        assert explanation.turns == history.turns

        # Recall: the block's text is what the model read; facts with recall's scores.
        assert escape_memory_text(recall.text) in sent
        injected = {f.fact_id: f for f in recall.facts}
        assert set(injected) == {tokyo.id, dog.id}
        assert all(f.reason is None for f in recall.facts)
        scores = {
            h.fact.id: h.score
            for h in mem.recall("Where does Alice live, does she have a dog?", entity_id="alice", k=10)
        }
        for fact in recall.facts:
            assert fact.text in recall.text
            assert math.isclose(fact.score, scores[fact.fact_id], abs_tol=1e-4)
            parts = fact.parts
            assert {"words", "vector", "time", "recency", "bm25", "cosine"} <= set(parts)
            total = parts["words"] + parts["vector"] + parts["time"] + parts["recency"]
            assert math.isclose(min(1.0, total), fact.score, abs_tol=1e-4)
        assert injected[dog.id].parts["vector"] > 0  # found by meaning ("dog" for "beagle")
        assert injected[tokyo.id].parts["words"] > 0

        # What was left out, and why.
        reasons = {f.fact_id: f.reason for f in recall.left_out}
        assert reasons.get(weak.id) in {"threshold", "limit"}
        assert all(f.fact_id not in injected for f in recall.left_out)

        # The JSON form names each fact by id with its text, score and parts.
        data = json.loads(json.dumps(explanation.to_dict()))
        assert data["exchange"]["id"] == exchange_id
        facts = data["blocks"][1]["facts"]
        assert {f["fact_id"] for f in facts} == {tokyo.id, dog.id}
        assert all(isinstance(f["score"], float) and f["parts"]["words"] >= 0 for f in facts)
        assert data["blocks"][0]["turns"][0] == {
            "role": "user",
            "content": "Hello there",
            "exchange_id": first.id,
        }

        # A call into which nothing was injected is explained without blocks.
        bare = mem.explain(first.id)
        assert bare is not None and bare.blocks == ()
        assert mem.explain("no-such-exchange") is None
    finally:
        mem.close()


def test_facts_the_conversation_carries_and_facts_past_the_budget_are_left_out(server):
    mem = make(InMemoryStore(), recall=RecallBudget(k=6, max_tokens=40, min_score=0.05))
    try:
        client = client_for(mem, server)
        said = mem.remember("Alice drinks green tea every morning", entity_id="alice")
        long = mem.remember("Alice drinks " + "very " * 60 + "strong coffee", entity_id="alice")
        short = mem.remember("Alice drinks tea", entity_id="alice")
        mem.recall("tea", entity_id="alice")  # warm the index
        with mem.scope(entity_id="alice", session_id="s2"):
            client.chat.completions.create(
                model="m",
                messages=[
                    user("Alice drinks green tea every morning"),
                    {"role": "assistant", "content": "Noted."},
                    user("What does Alice drink?"),
                ],
            )
        mem.flush()
        (ex,) = mem.exchanges(session_id="s2")
        (block,) = mem.explain(ex.id).blocks
        assert [f.fact_id for f in block.facts] == [short.id]
        reasons = {f.fact_id: f.reason for f in block.left_out}
        assert reasons[said.id] == "duplicate"
        assert reasons[long.id] == "budget"
    finally:
        mem.close()


def test_recording_fails_open(server, monkeypatch):
    """A broken recorder leaves the exchange without its record; the call and the
    capture go on."""
    import memtap.capture.explanation

    def broken(plan):
        raise RuntimeError("recorder down")

    monkeypatch.setattr(memtap.capture.explanation, "injected_blocks", broken)
    mem = make(InMemoryStore())
    try:
        client = client_for(mem, server)
        mem.remember("Alice lives in Tokyo", entity_id="alice")
        mem.recall("tokyo", entity_id="alice")
        with mem.scope(entity_id="alice", session_id="s3"):
            reply = client.chat.completions.create(model="m", messages=[user("Where is Tokyo?")])
        assert reply.choices[0].message.content
        assert OPEN_TAG in system_text(server)
        mem.flush()
        (ex,) = mem.exchanges(session_id="s3")
        assert ex.input[0].content == "Where is Tokyo?"
        assert mem.explain(ex.id).blocks == ()
    finally:
        mem.close()
