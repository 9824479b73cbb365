"""memtap.request.sessionblocks: session_init blocks kept byte-identical for a session, hybrid blocks
adding only what is new, per-turn blocks never repeating a kept fact."""

from __future__ import annotations

import pytest

from memtap.protocol.model import Attribution
from memtap.protocol.wire import InjectionPlan, SystemBlock
from memtap.request.sessionblocks import Known, SessionBlocks, without_known

ALICE = Attribution(entity_id="alice", session_id="s1")
HEADER = "Facts remembered about the user:"


def turn(blocks: SessionBlocks, attribution: Attribution, *items: SystemBlock) -> list[SystemBlock]:
    return list(blocks.apply(attribution, InjectionPlan(system_blocks=items)).system_blocks)


def test_a_session_block_is_computed_once_and_kept_byte_identical() -> None:
    blocks = SessionBlocks()
    first = turn(blocks, ALICE, SystemBlock(text="profile v1", cache="session_init", source="p"))
    later = turn(
        blocks, ALICE, SystemBlock(text="profile v2 (the data changed)", cache="session_init", source="p")
    )
    assert first == later == [SystemBlock(text="profile v1", cache="session_init", source="p")]
    assert first[0] is later[0]  # the very same block: the same bytes every turn
    assert blocks.sources(ALICE) == {"p"}


def test_a_kept_block_is_injected_even_when_its_injector_skips_the_turn() -> None:
    blocks = SessionBlocks()
    turn(blocks, ALICE, SystemBlock(text="profile", cache="session_init", source="p"))
    assert [b.text for b in turn(blocks, ALICE, SystemBlock(text="recall"))] == ["profile", "recall"]


def test_sessions_and_entities_are_kept_apart() -> None:
    blocks = SessionBlocks()
    turn(blocks, ALICE, SystemBlock(text="alice", cache="session_init", source="p"))
    bob = Attribution(entity_id="bob", session_id="s1")
    other = Attribution(entity_id="alice", session_id="s2")
    assert [b.text for b in turn(blocks, bob, SystemBlock(text="bob", cache="session_init", source="p"))] == [
        "bob"
    ]
    assert turn(blocks, other) == []
    blocks.drop(entity_id="alice")
    assert blocks.sources(ALICE) == frozenset() and blocks.sources(bob) == {"p"}


def test_per_turn_only_requests_create_no_session_entry() -> None:
    blocks = SessionBlocks()
    plan = InjectionPlan(system_blocks=[SystemBlock(text="recall")])
    assert blocks.apply(ALICE, plan) is plan and len(blocks) == 0


def test_the_lru_is_bounded() -> None:
    blocks = SessionBlocks(max_sessions=2, max_blocks=1)
    for n in range(3):
        turn(blocks, Attribution(session_id=f"s{n}"), SystemBlock(text=f"{n}", cache="session_init"))
    assert len(blocks) == 2 and blocks.sources(Attribution(session_id="s0")) == frozenset()
    extra = turn(
        blocks,
        Attribution(session_id="s2"),
        SystemBlock(text="new", cache="session_init", source="other"),
    )
    assert [b.text for b in extra] == ["2", "new"]  # past the bound: used as it comes


def test_hybrid_keeps_the_first_block_and_adds_only_new_facts() -> None:
    blocks = SessionBlocks()

    def recall(*facts: str) -> SystemBlock:
        return SystemBlock(text="\n".join([HEADER, *(f"- {f}" for f in facts)]), cache="hybrid", source="r")

    first = turn(blocks, ALICE, recall("lives in Tokyo"))
    assert [(b.cache, b.text) for b in first] == [("session_init", f"{HEADER}\n- lives in Tokyo")]
    second = turn(blocks, ALICE, recall("lives in Tokyo", "has a beagle"))
    assert [(b.cache, b.text) for b in second] == [
        ("session_init", f"{HEADER}\n- lives in Tokyo"),
        ("per_turn", f"{HEADER}\n- has a beagle"),  # the header stays, the known fact goes
    ]
    assert second[0] is first[0]
    third = turn(blocks, ALICE, recall("lives  in tokyo"))  # nothing new (spacing, case)
    assert [b.cache for b in third] == ["session_init"]


def test_per_turn_blocks_of_any_source_do_not_repeat_kept_facts() -> None:
    blocks = SessionBlocks()
    turn(blocks, ALICE, SystemBlock(text="- likes tea\n- lives in Tokyo", cache="session_init", source="p"))
    out = turn(blocks, ALICE, SystemBlock(text="Recalled:\n- likes tea\n- plays go", source="recall"))
    assert out[1].text == "Recalled:\n- plays go"


def test_fact_ids_decide_when_blocks_carry_them() -> None:
    kept = SystemBlock(text="Known:\nAlice lives in Tokyo", fact_ids=["", "f1"], cache="session_init")
    fresh = SystemBlock(
        text="Recalled:\nAlice lives in Tokyo (updated wording)\nAlice has a beagle",
        fact_ids=["", "f1", "f2"],
    )
    left = without_known(fresh, Known.of([kept]))
    assert left is not None and left.text == "Recalled:\nAlice has a beagle" and left.fact_ids == ("", "f2")
    assert without_known(SystemBlock(text="Recalled:\nx", fact_ids=["", "f1"]), Known.of([kept])) is None
    untouched = SystemBlock(text="nothing known")
    assert without_known(untouched, Known.of([kept])) is untouched


def test_fact_ids_must_match_the_lines() -> None:
    with pytest.raises(ValueError, match="one id per line"):
        SystemBlock(text="a\nb", fact_ids=["f1"])
    with pytest.raises(ValueError):
        SystemBlock(text="a", cache="sometimes")
    with pytest.raises(ValueError):
        SystemBlock(text="a", point="system.middle")


def test_blocks_without_a_source_are_kept_apart_by_their_order() -> None:
    blocks = SessionBlocks()
    first = turn(
        blocks,
        ALICE,
        SystemBlock(text="one v1", cache="session_init"),
        SystemBlock(text="two v1", cache="session_init"),
    )
    later = turn(
        blocks,
        ALICE,
        SystemBlock(text="one v2", cache="session_init"),
        SystemBlock(text="two v2", cache="session_init"),
    )
    assert [b.text for b in first] == [b.text for b in later] == ["one v1", "two v1"]
