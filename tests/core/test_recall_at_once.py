"""A turn is recallable as soon as it is written (issue 34, item 6): an exchange's episodes
are stored and indexed at once, with the turns before them as context; the session's next
exchange completes their context in the store and in the recall index (in place: the same
slot, the same vector); nothing waits in memory. The index's in-place update is held to
what indexing the new context from scratch gives, over generated facts and contexts."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memtap
from memtap.longterm.index import EntityIndex
from memtap.longterm.memorize import conversation_turns, episodes_of
from memtap.protocol.model import Fact, Message
from memtap.storage.store import InMemoryStore
from memtap.testing.timing import eventually

#: How long a turn may take to become recallable (bounded polling, no flush).
AT_ONCE = 2.0
TURN = "My favourite colour is teal."
QUESTION = "What is my favourite colour?"


def user(text: str) -> Message:
    return Message("user", text)


def assistant(text: str) -> Message:
    return Message("assistant", text)


def recalled(mem: memtap.Memory, query: str, **kw: Any) -> list[str]:
    return [h.text for h in mem.recall(query, entity_id="alice", **kw)]


def stored(mem: memtap.Memory, text: str) -> Fact | None:
    return next((f for f in mem.store.facts(entity_id="alice") if f.text == text), None)


@pytest.mark.parametrize("index", ["cold", "loaded"])
def test_a_captured_turn_is_recalled_at_once_without_a_flush(mem: memtap.Memory, index: str) -> None:
    if index == "loaded":
        assert mem.recall(QUESTION, entity_id="alice") == []  # the entity's index, loaded empty
    mem.capture([user(TURN)], [assistant("Noted: teal.")], entity_id="alice", session_id="s1")
    assert eventually(lambda: TURN in recalled(mem, QUESTION), AT_ONCE), mem.store.facts(entity_id="alice")


def test_the_next_exchange_completes_the_context_in_the_store_and_the_loaded_index(
    mem: memtap.Memory,
) -> None:
    first_turns = [user("We finally booked the flights yesterday"), assistant("Where are you off to?")]
    mem.capture(first_turns[:1], first_turns[1:], entity_id="alice", session_id="s1")
    assert eventually(lambda: stored(mem, "We finally booked the flights yesterday") is not None, AT_ONCE)
    booked = stored(mem, "We finally booked the flights yesterday")
    assert booked is not None and "Lisbon" not in booked.metadata["context"]
    # Found by its own words; not (yet) by words only a following turn will say.
    assert "We finally booked the flights yesterday" in recalled(mem, "booked flights")
    assert recalled(mem, "Lisbon") == []
    loads = mem.recall_stats().index_loads

    second_turns = [user("Lisbon, for the whole of June"), assistant("Lovely, enjoy the trams")]
    mem.capture(second_turns[:1], second_turns[1:], entity_id="alice", session_id="s1")

    def completed() -> bool:
        fact = stored(mem, "We finally booked the flights yesterday")
        return fact is not None and "Lisbon" in fact.metadata["context"]

    assert eventually(completed, AT_ONCE)
    assert eventually(lambda: "We finally booked the flights yesterday" in recalled(mem, "Lisbon"), AT_ONCE)
    (hit,) = [h for h in mem.recall("Lisbon", entity_id="alice") if h.fact.id == booked.id]
    assert "Lisbon" in hit.fact.metadata["context"]  # the indexed fact carries it too
    assert mem.recall_stats().index_loads == loads  # the loaded index was updated in place
    # Every episode of the first exchange has the context the whole conversation gives it.
    assert mem.flush()
    exchanges = list(mem.store.exchanges(entity_id="alice"))
    whole = episodes_of(exchanges[0], after=conversation_turns(exchanges[1]), assistant=True)
    by_id = {f.id: f for f in mem.store.facts(entity_id="alice")}
    assert [by_id[e.id].metadata for e in whole] == [e.metadata for e in whole]
    assert mem.longterm.memorizer.stats.completed == len(whole) == 1  # the question is no episode


def test_an_identical_turn_of_another_session_keeps_the_first_ones_context(mem: memtap.Memory) -> None:
    mem.capture([user(TURN)], [assistant("Noted, teal it is")], entity_id="alice", session_id="a")
    mem.capture([user(TURN)], [assistant("Teal is a calm colour")], entity_id="alice", session_id="b")
    mem.capture([user("I also like navy")], [assistant("Navy suits teal")], entity_id="alice", session_id="b")
    mem.capture([user("Kids: two")], [assistant("Nice")], entity_id="alice", session_id="a")
    assert mem.flush()
    teal = stored(mem, TURN)
    assert teal is not None
    assert "Noted, teal it is" in teal.metadata["context"] and "Kids: two" in teal.metadata["context"]
    assert "navy" not in teal.metadata["context"].lower()
    assert [f.text for f in mem.store.facts(entity_id="alice")].count(TURN) == 1


class FirstContextStore(InMemoryStore):
    """A store without ``update_fact_context`` (an older third-party backend)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "update_fact_context":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_store_that_cannot_update_a_context_keeps_the_first_and_recalls_at_once() -> None:
    mem = memtap.Memory(FirstContextStore(), entry_points=False, embedder=False, spool=False)
    try:
        mem.capture([user(TURN)], [assistant("Noted.")], entity_id="alice", session_id="s1")
        assert eventually(lambda: TURN in recalled(mem, QUESTION), AT_ONCE)
        mem.capture([user("Navy too")], [assistant("Fine")], entity_id="alice", session_id="s1")
        assert mem.flush()
        teal = stored(mem, TURN)
        assert teal is not None and teal.metadata["context"] == "Noted."
        assert TURN in recalled(mem, QUESTION)
    finally:
        mem.close()


# -- the index's in-place update --------------------------------------------------------

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)
WORDS = ["lisbon", "june", "trams", "sister", "joanna", "flights", "booked", "beagle", "teal", "navy"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
contexts = st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join)


def fact(i: int, text: str, context: str) -> Fact:
    metadata = {"context": context} if context else {}
    return Fact(
        id=f"f{i}", entity_id="alice", text=text, created_at=T0 + _dt.timedelta(days=i), metadata=metadata
    )


def postings(index: EntityIndex) -> dict[str, list[tuple[int, float]]]:
    return {term: list(zip(p.slots, p.tf)) for term, p in index.postings.items()}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(texts, contexts, contexts, st.booleans()), min_size=1, max_size=12),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
)
def test_replacing_contexts_indexes_as_indexing_them_from_scratch(
    rows: list[tuple[str, str, str, bool]], query: str
) -> None:
    """Whatever the contexts before and after (none, shared words, words no other fact
    uses, the same), the updated index has the postings, lengths and scores of an index
    built with the new contexts, and answers searches alike."""
    before = [fact(i, text, old) for i, (text, old, _, _) in enumerate(rows)]
    after = [fact(i, text, new) for i, (text, _, new, _) in enumerate(rows)]
    updated = EntityIndex()
    updated.add(before)
    version = updated.version
    changed = [f for f, (_, _, _, update) in zip(after, rows) if update]
    assert updated.replace_context(changed) == []  # the embedded text is the fact's own
    expected = [a if update else b for a, b, (_, _, _, update) in zip(after, before, rows)]
    fresh = EntityIndex()
    fresh.add(expected)
    assert postings(updated) == postings(fresh)
    assert np.allclose(updated._doclen[: len(rows)], fresh._doclen[: len(rows)])
    assert updated.total_len == pytest.approx(fresh.total_len)
    assert np.allclose(updated.bm25(query), fresh.bm25(query))
    assert updated.live_facts() == fresh.live_facts()
    assert [(f.id, round(s, 6)) for f, s in updated.search(query, k=20)] == [
        (f.id, round(s, 6)) for f, s in fresh.search(query, k=20)
    ]
    moved = any(b.metadata != a.metadata for a, b in zip(expected, before))
    assert (updated.version > version) == moved  # a remembered search is not served stale
    assert updated.unseen_terms(query) == fresh.unseen_terms(query)


def test_replacing_a_context_keeps_the_vector_and_skips_what_is_not_indexed() -> None:
    index = EntityIndex()
    said = fact(0, "Yes, in June!", "a trip?")
    index.add([said], {said.id: np.asarray([1.0, 0.0], np.float32)})
    gone = fact(1, "old", "x")
    assert index.replace_context([attrs.evolve(said, metadata={"context": "Lisbon"}), gone]) == []
    assert index.vector_of(said.id) is not None and index.missing_vectors() == []
    assert index.live_facts()[0].metadata == {"context": "Lisbon"}
    assert [f.id for f, _ in index.search("lisbon")] == [said.id]
    assert index.search("trip") == []


def test_a_fact_whose_embedded_text_changes_with_its_context_is_embedded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Were a fact's vector ever made of its context too, a new context would drop the
    vector and hand the fact back to be embedded again (in the background)."""
    import memtap.longterm.index as index_module

    monkeypatch.setattr(index_module, "embedding_text", lambda f: f"{f.text} {f.metadata.get('context', '')}")
    index = EntityIndex()
    said = fact(0, "Yes, in June!", "a trip?")
    index.add([said], {said.id: np.asarray([1.0, 0.0], np.float32)})
    (stale,) = index.replace_context([attrs.evolve(said, metadata={"context": "Lisbon"})])
    assert stale.metadata == {"context": "Lisbon"}
    assert index.vector_of(said.id) is None and index.missing_vectors() == [stale]
