"""memtap.formats.placement: which block goes where (inside an agent's system text, at its end, or
after the cached prefix), and the content helpers every protocol edits bodies with."""

from __future__ import annotations

import pytest
from placement_support import Sections

from memtap import telemetry
from memtap.formats.blocks import OPEN_TAG
from memtap.formats.placement import (
    append_text,
    arrange,
    content_texts,
    inject_blocks,
    marks,
    split_cache,
    with_system,
    with_texts,
)
from memtap.protocol.wire import InjectionPlan, SystemBlock

STABLE = SystemBlock(text="stable fact", cache="session_init")
TURN = SystemBlock(text="turn fact")
PROMPT = "You are helpful.\n[mem]\nnotes\n[rules]\nbe kind\n"


def test_without_a_profile_blocks_go_to_the_end_of_the_system_stable_first() -> None:
    arranged = arrange(InjectionPlan(system_blocks=[TURN, STABLE]), [PROMPT])
    assert arranged.texts == (PROMPT,)
    assert (arranged.stable, arranged.volatile, arranged.tail) == ((STABLE,), (TURN,), ())
    stable, turn = arranged.suffix()
    assert stable.startswith(OPEN_TAG) and "stable fact" in stable and "turn fact" in turn


def test_a_profile_places_blocks_at_their_slot_as_one_element_per_anchor() -> None:
    plan = InjectionPlan(system_blocks=[TURN, STABLE], profile=Sections())
    arranged = arrange(plan, [PROMPT])
    (text,) = arranged.texts
    assert arranged.suffix() == [] and arranged.tail == ()
    before, _, after = text.partition(OPEN_TAG)
    assert before == "You are helpful.\n[mem]\nnotes\n"
    assert after.index("stable fact") < after.index("turn fact")  # stable first, one element
    assert text.count(OPEN_TAG) == 1 and text.endswith("[rules]\nbe kind\n")


def test_anchored_blocks_can_land_in_any_of_several_texts() -> None:
    plan = InjectionPlan(
        system_blocks=[SystemBlock(text="rule", slot="rules", relation="before")], profile=Sections()
    )
    arranged = arrange(plan, ["You are helpful.\n", "[mem]\nnotes\n", "[rules]\nbe kind"])
    assert arranged.texts[:2] == ("You are helpful.\n", "[mem]\nnotes\n")
    assert arranged.texts[2].startswith(OPEN_TAG) and arranged.texts[2].endswith(
        "</memtap-memory>\n[rules]\nbe kind"
    )


def test_unresolved_slots_fall_back_to_their_point_and_are_traced(memtap_spans) -> None:
    blocks = [
        SystemBlock(text="skills", slot="skills"),
        SystemBlock(text="greeting", slot="persona", point="user.before"),
    ]
    with telemetry.tracer().start_as_current_span("inject"):
        arranged = arrange(InjectionPlan(system_blocks=blocks, profile=Sections()), [PROMPT])
    assert arranged.texts == (PROMPT,)
    assert arranged.volatile == (blocks[0],) and arranged.tail == (blocks[1],)
    (span,) = memtap_spans.get_finished_spans()
    fallbacks = [e.attributes for e in span.events if e.name == "memtap.anchor.fallback"]
    assert [(a["memtap.slot"], a["memtap.point"]) for a in fallbacks] == [
        ("skills", "system.suffix"),
        ("persona", "user.before"),
    ]
    (placement,) = [e.attributes for e in span.events if e.name == "memtap.formats.placement"]
    assert (placement["memtap.formats.blocks.system"], placement["memtap.formats.blocks.tail"]) == (1, 1)


def test_with_the_prompt_cache_only_session_blocks_enter_the_system() -> None:
    plan = InjectionPlan(system_blocks=[TURN, STABLE], profile=Sections())
    arranged = arrange(plan, [PROMPT], cached=True)
    assert arranged.tail == (TURN,) and "stable fact" in arranged.texts[0]
    assert "turn fact" not in arranged.texts[0]
    tail = arranged.tail_text()
    assert tail is not None and "turn fact" in tail
    bare = arrange(InjectionPlan(system_blocks=[TURN, STABLE]), [PROMPT], cached=True)
    assert (bare.stable, bare.volatile, bare.tail) == ((STABLE,), (), (TURN,))


def test_a_system_that_must_not_change_sends_everything_to_the_tail() -> None:
    arranged = arrange(
        InjectionPlan(system_blocks=[TURN, STABLE], profile=Sections()), [PROMPT], system=False
    )
    assert arranged.texts == (PROMPT,) and arranged.tail == (TURN, STABLE)
    tail = arranged.tail_text()
    assert tail is not None and tail.index("stable fact") < tail.index("turn fact")
    moved = arranged.tail_in_system()
    assert (moved.stable, moved.volatile, moved.tail) == ((STABLE,), (TURN,), ())


def test_split_cache_keeps_order() -> None:
    hybrid = SystemBlock(text="h", cache="hybrid")
    assert split_cache([TURN, STABLE, hybrid]) == ([STABLE], [TURN, hybrid])


# -- content helpers ------------------------------------------------------------------------------


def test_content_texts_and_with_texts_keep_what_they_do_not_change() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "u"}}
    thought = {"text": "hmm", "thought": True}
    first = {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}
    content = [first, image, thought, {"text": "b"}]
    assert content_texts(content) == ["a", "b"] and content_texts("s") == ["s"] and content_texts(None) == []
    assert with_texts(content, ["a", "b"]) is content
    edited = with_texts(content, ["A", "b"])
    assert edited[0] == {"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}
    assert list(edited[0]) == ["type", "text", "cache_control"]
    assert edited[1] is image and edited[2] is thought and edited[3] is content[3]
    assert with_texts("s", ["t"]) == "t"


def test_append_text_keeps_the_content_type() -> None:
    assert append_text("hi", "M") == "hi\n\nM"
    assert append_text("", "M") == "M" and append_text(None, "M") == "M"
    parts = [{"type": "text", "text": "hi"}]
    assert append_text(parts, "M") == [*parts, {"type": "text", "text": "M"}]
    assert append_text(parts, "M", lambda t: {"text": t})[-1] == {"text": "M"}


def test_with_system_appends_after_the_apps_parts() -> None:
    arranged = arrange(InjectionPlan(system_blocks=[STABLE]), ["x"])
    system = [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]
    placed = with_system(system, arranged)
    assert placed[0] is system[0] and placed[1]["text"].startswith(OPEN_TAG)
    assert with_system("x", arranged).startswith("x\n\n" + OPEN_TAG)
    assert with_system(None, arranged).startswith(OPEN_TAG)
    assert with_system(None, arranged, as_list=True)[0]["text"].startswith(OPEN_TAG)
    nothing = arrange(InjectionPlan(), ["x"])
    assert with_system(system, nothing) is system


def test_marks_finds_cache_markers_on_items_and_their_parts() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {}}]}]
    assert marks("cache_control", None, messages)
    assert marks("cache_control", [{"name": "tool", "cache_control": {}}])
    assert marks("cachePoint", [{"text": "a"}, {"cachePoint": {"type": "default"}}])
    assert not marks("cache_control", [{"role": "user", "content": "q"}], None, "text")


@pytest.mark.parametrize("cached", [False, True])
def test_inject_blocks_puts_the_tail_in_the_latest_user_message(cached: bool) -> None:
    body = {
        "system": [{"type": "text", "text": "rules"}],
        "messages": [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
        ],
    }
    out = dict(body)
    inject_blocks(out, body, InjectionPlan(system_blocks=[TURN, STABLE]), cached=cached)
    assert out["messages"][:2] == body["messages"][:2]
    last = out["messages"][2]["content"]
    if cached:
        assert len(out["system"]) == 2 and "stable fact" in out["system"][1]["text"]
        assert last[0] == body["messages"][2]["content"][0]  # tool results stay first
        assert "turn fact" in last[1]["text"]
    else:
        assert len(out["system"]) == 3 and last == body["messages"][2]["content"]


def test_inject_blocks_without_a_user_message_falls_back_to_the_system() -> None:
    body = {"messages": [{"role": "assistant", "content": "prefill"}]}
    out = dict(body)
    inject_blocks(out, body, InjectionPlan(system_blocks=[TURN]), cached=True)
    assert out["messages"] == body["messages"] and "turn fact" in out["system"]
