"""Facts derived from exchanges are idempotent (issue #13, item 3).

Memorizing an exchange again (the spool replays it after a crash) adds no copy, and an entity
saying the same thing again, in any session, keeps one episode. Storing a derived fact twice
is a no-op because its id is derived from what it comes from.
"""

from __future__ import annotations

import json

import memtap
from memtap.capture.writer import CapturedCall
from memtap.longterm.memorize import episode_id, episodes_of
from memtap.protocol.model import Attribution, Exchange, Message
from memtap.storage.store import InMemoryStore


def exchange(
    text: str, *, entity: str = "alice", session: str = "s1", process: str | None = "bot"
) -> Exchange:
    return Exchange(
        attribution=Attribution(entity_id=entity, session_id=session, process_id=process),
        provider="t",
        operation="chat",
        input=[Message("user", text)],
        output=[Message("assistant", "Noted.")],
    )


class ScriptedLLM:
    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)

    def complete(self, prompt: str) -> str:
        return self.answers.pop(0)


def ops(*items: dict[str, str]) -> str:
    return json.dumps({"memories": list(items)})


def memory(store: InMemoryStore, **kwargs: object) -> memtap.Memory:
    return memtap.Memory(store, entry_points=False, embedder=False, spool=False, **kwargs)  # type: ignore[arg-type]


def stored(mem: memtap.Memory, *exchanges: Exchange) -> None:
    for ex in exchanges:
        mem.writer.submit(CapturedCall(lambda ex=ex: ex, ex.attribution))
    assert mem.flush()


def test_identical_turns_in_many_sessions_are_one_episode():
    """190 identical agent requests made 388 facts."""
    store = InMemoryStore()
    mem = memory(store)
    stored(mem, *(exchange("My favourite colour is teal, remember it", session=f"s{i}") for i in range(190)))
    (episode,) = store.facts(entity_id="alice", include_superseded=True)
    assert episode.text == "My favourite colour is teal, remember it"
    stored(mem, exchange("my favourite   colour is TEAL, remember it", session="other"))
    assert len(store.facts(entity_id="alice")) == 1  # case and spacing do not make a new one
    mem.close()


def test_episodes_stay_apart_per_entity_and_process():
    text = "I adopted a beagle called Mochi"
    ids = {
        episodes_of(exchange(text, entity=e, process=p))[0].id
        for e, p in [("alice", "bot"), ("bob", "bot"), ("alice", None), ("alice", "other")]
    }
    assert len(ids) == 4
    assert episode_id("alice", "bot", text) == episodes_of(exchange(text))[0].id


def test_replaying_an_exchange_adds_no_episode():
    store = InMemoryStore()
    mem = memory(store)
    turn = exchange("I live in Tokyo with my beagle Mochi")
    stored(mem, turn)
    mem.longterm.memorizer.submit([turn])  # what a replay from the spool does
    assert mem.flush()
    assert len(store.facts(entity_id="alice", include_superseded=True)) == 1
    mem.close()


def test_replaying_an_exchange_adds_no_extracted_fact():
    """The extractor sees the facts it made the first time and may answer differently: a
    replayed exchange still adds nothing (ids come from the exchange and the position)."""
    store = InMemoryStore()
    llm = ScriptedLLM(
        ops(
            {"op": "ADD", "text": "The user lives in Tokyo."}, {"op": "ADD", "text": "The user has a beagle."}
        ),
        ops({"op": "ADD", "text": "The user lives in Tokyo."}, {"op": "ADD", "text": "The user has a dog."}),
        ops({"op": "UPDATE", "id": "f1", "text": "The user lives in Japan."}),
    )
    mem = memory(store, llm=llm)
    turn = exchange("I live in Tokyo with my beagle Mochi")
    for _ in range(3):
        mem.longterm.memorizer.submit([turn])
        assert mem.flush()
    facts = store.facts(entity_id="alice", include_superseded=True)
    assert sorted(f.text for f in facts) == ["The user has a beagle.", "The user lives in Tokyo."]
    assert all(f.superseded_by is None for f in facts)
    mem.close()


def test_different_exchanges_still_learn_new_facts():
    store = InMemoryStore()
    llm = ScriptedLLM(
        ops({"op": "ADD", "text": "The user lives in Tokyo."}),
        ops({"op": "ADD", "text": "The user has a beagle."}),
    )
    mem = memory(store, llm=llm)
    stored(mem, exchange("I live in Tokyo"), exchange("I have a beagle called Mochi"))
    assert len(store.facts(entity_id="alice")) == 2
    mem.close()


def test_stored_episode_ids_do_not_change():
    """An episode's id is what a store already holds: text compared without case or spacing
    must give the very ids it gave when they were written (literal ids, computed before the
    normalisation moved to ``longterm/text.py``), short texts and long ones (uncached) alike."""
    store = InMemoryStore()
    mem = memory(store)
    stored(mem, exchange("  Alice   MOVED to\n\tTokyo in June.  "))
    assert [f.id for f in store.facts(entity_id="alice", include_superseded=True)] == [
        "1ea23407c5f09a9bd1419881e2c2db7a"
    ]
    mem.close()
    assert episodes_of(exchange("alice moved to tokyo in june."))[0].id == "1ea23407c5f09a9bd1419881e2c2db7a"
    assert episodes_of(exchange("Word " * 600))[0].id == "f657217403026ff71af8d5c62814cd53"
    assert episode_id("alice", "support-bot", "  Alice   MOVED to\n\tTokyo in June.  ") == (
        "61094d61ad9140fff8470b633c351225"
    )
    assert episode_id("alice", "bot", "Word " * 600) == "29bb9ab617a57045c648adb627ee863e"
    assert episode_id("alice", None, "Sure, noted: you  moved to Tokyo.", role="assistant") == (
        "4db972c3efe6c44a4df0f25064ead93a"
    )
