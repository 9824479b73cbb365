"""What a conversation becomes in memory through the public API (issue 17):
``capture(..., at=)`` and ``remember(..., context=, at=)``, episodes that carry their
neighbouring turns and their time, and assistant turns that are recallable too."""

from __future__ import annotations

import datetime as _dt
import json

import memtap
from memtap.longterm.recall_injector import fact_line
from memtap.protocol.model import Message
from memtap.storage.store import InMemoryStore

MAY_8 = _dt.datetime(2023, 5, 8, 13, 56, tzinfo=_dt.timezone.utc)


def user(text: str) -> Message:
    return Message("user", text)


def assistant(text: str) -> Message:
    return Message("assistant", text)


def test_capture_at_stores_that_time(mem):
    exchange = mem.capture(
        [user("I adopted a beagle called Mochi")], [assistant("How lovely")], entity_id="alice", at=MAY_8
    )
    assert exchange.started_at == MAY_8 and exchange.ended_at == MAY_8
    assert mem.flush()
    (stored,) = mem.store.exchanges(entity_id="alice")
    assert stored.started_at == MAY_8
    (episode,) = mem.facts(entity_id="alice")
    assert (episode.text, episode.created_at) == ("I adopted a beagle called Mochi", MAY_8)


def test_capture_at_without_a_timezone_is_utc(mem):
    exchange = mem.capture([user("I adopted a beagle")], [assistant("ok")], at=MAY_8.replace(tzinfo=None))
    assert exchange.started_at == MAY_8


def test_remember_with_context_is_found_by_a_word_only_in_its_context(mem):
    fact = mem.remember(
        "She said it was the best day of the year",
        entity_id="alice",
        context="Caroline: I went to the pottery workshop yesterday",
        at=MAY_8,
    )
    assert fact.created_at == MAY_8
    (hit,) = mem.recall("pottery", entity_id="alice")
    assert hit.fact.id == fact.id
    assert hit.text == "She said it was the best day of the year"  # the context is not the fact
    assert [f.text for f in mem.facts(entity_id="alice")] == ["She said it was the best day of the year"]
    assert "pottery" not in fact_line(hit.fact)


def test_remember_keeps_working_without_the_new_arguments(mem):
    fact = mem.remember("Alice is allergic to peanuts", entity_id="alice")
    assert fact.metadata == {}
    assert mem.recall("peanuts", entity_id="alice")[0].fact.id == fact.id


def test_remember_redacts_secrets_in_the_context(mem):
    fact = mem.remember("my key is set", context="the key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789")
    assert "abcdefghijklmnopqrstuvwxyz0123456789" not in fact.metadata["context"]


def capture_conversation(mem, turns, *, session_id="s1", at=MAY_8):
    """Capture ``turns`` as (user, assistant) pairs of one session, a minute apart."""
    for i in range(0, len(turns), 2):
        mem.capture(
            [user(turns[i])],
            [assistant(turns[i + 1])],
            entity_id="alice",
            session_id=session_id,
            at=at + _dt.timedelta(minutes=i),
        )
    assert mem.flush()


def test_episodes_of_a_captured_conversation_carry_neighbouring_turns(mem):
    capture_conversation(
        mem,
        [
            "We finally booked the trip to Lisbon for June",
            "Lisbon in June sounds wonderful, enjoy the trams",
            "My sister Joanna is coming along too",
            "Travelling with family makes it even better",
        ],
    )
    episodes = {f.text: f for f in mem.facts(entity_id="alice")}
    sister = episodes["My sister Joanna is coming along too"]
    # The turns before it (an earlier exchange of the session) and its reply.
    assert "Lisbon" in sister.metadata["context"]
    assert "Travelling with family" in sister.metadata["context"]
    assert sister.created_at == MAY_8 + _dt.timedelta(minutes=2)
    # Found by words only its neighbours hold: who is coming to Lisbon?
    found = [h.text for h in mem.recall("who is coming to Lisbon", entity_id="alice", k=5)]
    assert "My sister Joanna is coming along too" in found
    # And by the turns that followed it, in the next exchange.
    booked = episodes["Lisbon in June sounds wonderful, enjoy the trams"]
    assert "Joanna" in booked.metadata["context"] and "Travelling" in booked.metadata["context"]


def test_neighbours_are_per_session(mem):
    capture_conversation(mem, ["I collect vintage stamps from Peru", "What a niche hobby"], session_id="a")
    capture_conversation(mem, ["I started learning the cello", "Good luck with it"], session_id="b")
    cello = next(f for f in mem.facts(entity_id="alice") if f.text.startswith("I started"))
    assert "stamps" not in cello.metadata["context"]


def test_an_assistant_turn_is_recallable(mem):
    capture_conversation(
        mem,
        [
            "Can you suggest a book for my long flight?",
            "I recommend The Hobbit by Tolkien, light enough for a flight",
        ],
    )
    (hit, *_) = mem.recall("what book did you recommend last time?", entity_id="alice")
    assert hit.text == "I recommend The Hobbit by Tolkien, light enough for a flight"
    assert hit.fact.kind == "episode" and hit.fact.metadata["role"] == "assistant"
    # The user's question is its context, and the block says who said it.
    assert "suggest a book" in hit.fact.metadata["context"]
    assert fact_line(hit.fact) == "- [2023-05-08] you (the assistant) said: " + hit.text


def test_identical_turns_are_one_episode_whatever_their_neighbours(mem):
    capture_conversation(mem, ["My favourite colour is teal", "Noted, teal it is"], session_id="a")
    capture_conversation(mem, ["My favourite colour is teal", "Teal is a calm colour"], session_id="b")
    texts = [f.text for f in mem.facts(entity_id="alice")]
    assert texts.count("My favourite colour is teal") == 1


def test_a_fact_is_found_by_its_date(mem):
    may = mem.remember("We went hiking near the lake", entity_id="alice", at=MAY_8)
    mem.remember("We went hiking in the mountains", entity_id="alice", at=MAY_8.replace(month=6))
    hits = mem.recall("where did we go hiking in May 2023?", entity_id="alice", k=2)
    assert hits[0].fact.id == may.id
    assert fact_line(hits[0].fact).startswith("- [2023-05-08] ")  # the block keeps the date


class AddsOneFact:
    """An LLM port that learns one fact from any exchange."""

    def complete(self, prompt: str) -> str:
        return json.dumps({"memories": [{"op": "ADD", "text": "The user has a beagle called Mochi."}]})


def test_facts_learned_from_a_captured_turn_carry_its_time():
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=False, spool=False, llm=AddsOneFact())
    mem.capture(
        [user("I adopted a beagle called Mochi")], [assistant("How lovely")], entity_id="alice", at=MAY_8
    )
    assert mem.flush()
    (fact,) = mem.facts(entity_id="alice")
    assert (fact.kind, fact.created_at) == ("fact", MAY_8)
    mem.close()
