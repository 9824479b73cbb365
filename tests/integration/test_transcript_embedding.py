"""An import's facts and the embedder (issue 35, item 1): a small transcript's facts are
embedded before the import returns; a large one's are left to embed (queueing them all held
the whole file in memory), recallable by words at once and by meaning once the next process
that loads the entity's index has embedded them."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import memtap
from memtap.cli.transcript import Turn, import_turns
from memtap.protocol.model import Message

T0 = _dt.datetime(2023, 5, 8, 13, 56, tzinfo=_dt.timezone.utc)
GROUPS = [{"dog", "beagle", "puppy"}, {"city", "tokyo", "paris"}, {"drink", "tea", "coffee"}]


class CountingEmbedder:
    """One dimension per meaning group; counts the texts it embedded."""

    name = "groups-import-v1"

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        out = []
        for text in texts:
            words = set(text.lower().replace("?", " ").replace(".", " ").split())
            out.append([float(len(words & g)) for g in GROUPS] + [0.01])
        return out


TURNS = [
    Turn("s", T0, (Message("user", "I adopted a beagle last week."),), (Message("assistant", "Lovely!"),)),
    Turn(
        "s",
        T0 + _dt.timedelta(minutes=1),
        (Message("user", "I moved to Tokyo in spring."),),
        (Message("assistant", "Nice place."),),
    ),
]


def open_memory(path: Path, embedder: CountingEmbedder) -> memtap.Memory:
    return memtap.Memory(f"duckdb:///{path}", entry_points=True, embedder=embedder)


def test_a_small_import_returns_with_its_facts_embedded(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    with open_memory(tmp_path / "m.duckdb", embedder) as mem:
        report = import_turns(mem, TURNS, entity_id="alice", sessions={"s"})
        assert report.new == 2 and report.unembedded == 0
        stored = len(mem.facts(entity_id="alice"))
        assert stored >= 2 and embedder.texts == stored  # all embedded before it returned
    again = CountingEmbedder()
    with open_memory(tmp_path / "m.duckdb", again) as mem:
        hits = mem.recall("which puppy?", entity_id="alice", k=1)
        assert "beagle" in hits[0].fact.text
        assert again.texts == 1  # the question only: the vectors were stored


def test_a_deferred_import_is_found_by_words_at_once_and_by_meaning_by_the_next_process(
    tmp_path: Path,
) -> None:
    embedder = CountingEmbedder()
    with open_memory(tmp_path / "m.duckdb", embedder) as mem:
        report = import_turns(mem, TURNS, entity_id="alice", sessions={"s"}, embed=False)
        stored = len(mem.facts(entity_id="alice"))
        assert report.new == 2 and report.unembedded == stored >= 2
        assert embedder.texts == 0  # the model is not even loaded during the import
    later = CountingEmbedder()
    with open_memory(tmp_path / "m.duckdb", later) as mem:
        assert "Tokyo" in mem.recall("moved Tokyo", entity_id="alice", k=1)[0].fact.text  # by words
        hits = mem.recall("which puppy?", entity_id="alice", k=1)  # by meaning: no shared word
        assert "beagle" in hits[0].fact.text
        mem.flush()
        assert later.texts >= stored  # this process embedded what the import left
