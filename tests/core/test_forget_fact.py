"""Memory.forget(entity_id=, fact_id=): one fact, its earlier versions and their retraction
records go; the entity's other facts, other entities and the conversation stay."""

from __future__ import annotations

import pytest

from memtap import Fact, StoreError


def test_forgets_the_fact_and_its_history_only(mem):
    old = mem.remember("Alice lives in Osaka", entity_id="alice")
    new = Fact(entity_id="alice", text="Alice lives in Tokyo", supersedes=old.id)
    mem.store.add_facts([new])
    pet = mem.remember("Alice has a beagle", entity_id="alice")
    bobs = mem.remember("Bob lives in Tokyo", entity_id="bob")
    mem.capture("I moved to Tokyo", "Noted.", entity_id="alice", session_id="s1")
    assert [s.fact.id for s in mem.recall("where does alice live", entity_id="alice")][:1] == [new.id]

    assert mem.forget(entity_id="alice", fact_id=new.id) == 2

    left = mem.store.facts(entity_id="alice", include_superseded=True)
    assert {f.id for f in left} >= {pet.id}
    assert not {old.id, new.id} & {f.id for f in left}
    assert all(
        "Tokyo" not in s.text and "Osaka" not in s.text
        for s in mem.recall("where does alice live", entity_id="alice")
    )
    assert mem.facts(entity_id="bob") == [bobs]
    assert [m.content for m in mem.history("s1", entity_id="alice")] == ["I moved to Tokyo", "Noted."]


def test_a_retraction_record_goes_with_the_fact(mem):
    fact = mem.remember("Alice likes jazz", entity_id="alice")
    tombstone = Fact(entity_id="alice", text=fact.text, supersedes=fact.id, kind="tombstone")
    mem.store.add_facts([tombstone])
    assert mem.forget(entity_id="alice", fact_id=fact.id) == 2
    assert mem.store.facts(entity_id="alice", include_superseded=True) == []


def test_another_entitys_fact_or_an_unknown_id_deletes_nothing(mem):
    bobs = mem.remember("Bob lives in Tokyo", entity_id="bob")
    assert mem.forget(entity_id="alice", fact_id=bobs.id) == 0
    assert mem.forget(entity_id="bob", fact_id="no-such-fact") == 0
    assert mem.facts(entity_id="bob") == [bobs]


def test_a_store_without_forget_facts_says_so(mem):
    class Plain:
        def __getattr__(self, name):
            if name == "forget_facts":
                raise AttributeError(name)
            return getattr(store, name)

    store = mem.store
    mem.store = Plain()
    try:
        with pytest.raises(StoreError, match="cannot delete one fact"):
            mem.forget(entity_id="alice", fact_id="x")
    finally:
        mem.store = store
