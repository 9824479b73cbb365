"""Recall's memo of a repeated search (an agent's tool loop asks the same question on every
request of a turn): answered again while the entity's index is unchanged, searched again as
soon as a fact arrives, is removed or gets its vector; and the quick query vector cache."""

from __future__ import annotations

import datetime as _dt
import threading

import memtap
from memtap.longterm.index import EntityIndex
from memtap.protocol.model import Fact
from memtap.storage.store import InMemoryStore

T0 = _dt.datetime(2025, 1, 1, tzinfo=_dt.timezone.utc)
GROUPS = [{"dog", "beagle", "puppy", "pet"}, {"tea", "coffee", "drink"}]


class Groups:
    """Words of one group share a dimension; counts the quick vectors it makes for queries
    (not those of the facts in :attr:`facts`, made as they are stored)."""

    name = "memo-groups-v1"

    def __init__(self) -> None:
        self.quick_calls = 0
        self.facts: set[str] = set()

    def embed(self, texts):
        out = []
        for text in texts:
            words = set(text.lower().replace("?", " ").split())
            out.append([float(len(words & g)) for g in GROUPS] + [0.01])
        return out

    def quick_query(self, text):
        if threading.current_thread().name != "memtap-embed" and text not in self.facts:
            self.quick_calls += 1
        return self.embed([text])[0]


def memory(embedder=None) -> memtap.Memory:
    return memtap.Memory(InMemoryStore(), entry_points=False, embedder=embedder or Groups())


def texts(found) -> list[str]:
    return [s.text for s in found]


def search(mem: memtap.Memory, query: str, **kw):
    kw.setdefault("deadline", 1.0)
    return mem.longterm.engine.search(query, entity_id="alice", k=3, **kw)


def test_a_repeated_search_is_answered_from_the_memo_until_a_fact_arrives():
    mem = memory()
    mem.remember("I adopted a beagle called Mochi", entity_id="alice", at=T0)
    mem.flush()
    mem.recall("warm", entity_id="alice")  # loads the entity's index
    stats = mem.longterm.engine.stats
    first = search(mem, "tell me about my beagle")
    assert texts(first) == ["I adopted a beagle called Mochi"]
    assert search(mem, "tell me about my beagle") == first
    assert stats.memo_hits == 1
    # A new fact: the same question is searched again and finds it (a memo kept past the
    # write would answer with the old hits).
    mem.remember("My beagle Mochi turned three today", entity_id="alice", at=T0 + _dt.timedelta(days=1))
    mem.flush()  # its vector too
    again = search(mem, "tell me about my beagle")
    assert "My beagle Mochi turned three today" in texts(again)
    assert stats.memo_hits == 1
    assert search(mem, "tell me about my beagle") == again
    assert stats.memo_hits == 2
    # A forgotten fact is no longer recalled (the entity's index is loaded again).
    gone = next(s for s in again if s.text.startswith("My beagle"))
    mem.forget(entity_id="alice", fact_id=gone.fact.id)
    assert texts(search(mem, "tell me about my beagle", deadline=None)) == ["I adopted a beagle called Mochi"]
    mem.close()


def test_the_memo_keeps_what_explain_records_and_tells_searches_apart():
    mem = memory()
    mem.remember("I adopted a beagle", entity_id="alice", at=T0)
    mem.remember("I drink green tea", entity_id="alice", at=T0)
    mem.flush()
    mem.recall("warm", entity_id="alice")
    parts: dict = {}
    below: list = []
    first = search(mem, "my beagle", parts=parts, below=below, min_score=0.5)
    kept_parts, kept_below = dict(parts), list(below)
    parts2: dict = {"stale": None}
    below2: list = ["stale"]
    assert search(mem, "my beagle", parts=parts2, below=below2, min_score=0.5) == first
    assert (parts2, below2) == (kept_parts, kept_below)
    # Another question, limit or threshold is another search.
    hits = mem.longterm.engine.stats.memo_hits
    search(mem, "my tea")
    search(mem, "my beagle", min_score=0.9)
    assert mem.longterm.engine.stats.memo_hits == hits
    mem.close()


def test_index_version_changes_with_every_write():
    index = EntityIndex()
    beagle = Fact(entity_id="alice", text="I adopted a beagle", created_at=T0)
    seen = [index.version]
    index.add([beagle])
    seen.append(index.version)
    index.add([beagle])  # already indexed: nothing changes
    assert index.version == seen[-1]
    index.set_vectors({beagle.id: [1.0, 0.0]})
    seen.append(index.version)
    index.remove([beagle.id])
    seen.append(index.version)
    assert len(set(seen)) == len(seen)


def test_a_vector_arriving_changes_the_answer():
    """Facts are embedded in the background: a search remembered before a fact's vector
    arrived is made again after."""
    mem = memory()
    mem.remember("I adopted a beagle", entity_id="alice", at=T0)
    mem.flush()
    engine = mem.longterm.engine
    mem.recall("warm", entity_id="alice")
    entry = engine.indexes.get("alice", wait=True)
    search(mem, "my puppy")
    version = entry.index.version
    engine._deliver("alice", {entry.index.live_facts()[0].id: [0.0, 1.0, 0.01]})
    assert entry.index.version != version
    hits = engine.stats.memo_hits
    search(mem, "my puppy")
    assert engine.stats.memo_hits == hits
    mem.close()


def test_quick_query_vectors_are_cached_by_text():
    emb = Groups()
    emb.facts = {"I adopted a beagle", "I drink green tea"}
    mem = memory(emb)
    mem.remember("I adopted a beagle", entity_id="alice", at=T0)
    mem.flush()
    mem.recall("warm", entity_id="alice")
    search(mem, "my beagle")
    calls = emb.quick_calls
    # The facts change (a new search), the question does not: its quick vector is reused.
    mem.remember("I drink green tea", entity_id="alice", at=T0)
    search(mem, "my beagle")
    assert emb.quick_calls == calls
    search(mem, "my tea")
    assert emb.quick_calls == calls + 1
    mem.close()
