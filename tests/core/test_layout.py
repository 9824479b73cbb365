"""memtap.formats.layout: where blocks and history go in a chat-style message list."""

from __future__ import annotations

from placement_support import Sections

from memtap.formats.layout import MessageCodec, layout_messages, leading_count
from memtap.protocol.model import Message
from memtap.protocol.wire import InjectionPlan, SystemBlock


def is_system(m):
    return m["role"] == "system"


def write(m: Message):
    return {"role": m.role, "content": m.content}


def blocks(bs):
    return [{"role": "system", "content": "+".join(b.text for b in bs)}] if bs else []


class Codec(MessageCodec):
    def __init__(self, is_system=is_system, tail=None):
        self.is_system = is_system
        self.tail = tail

    def is_system_message(self, item):
        return self.is_system(item)

    def write_message(self, message):
        return write(message)

    def system_message(self, bs):
        return blocks(bs)

    def tail_message(self, bs):
        return self.tail(bs) if self.tail else super().tail_message(bs)


CODEC = Codec()


APP = [
    {"role": "system", "content": "rules"},
    {"role": "system", "content": "more"},
    {"role": "user", "content": "q"},
]
PLAN = InjectionPlan(
    history=[Message(role="user", content="h1"), Message(role="assistant", content="a1")],
    system_blocks=[
        SystemBlock(text="turn", cache="per_turn"),
        SystemBlock(text="stable", cache="session_init"),
    ],
)


def test_order_is_app_system_stable_history_per_turn_rest():
    out = layout_messages(APP, PLAN, CODEC)
    assert [m["content"] for m in out] == ["rules", "more", "stable", "h1", "a1", "turn", "q"]
    assert out[0] is APP[0] and out[-1] is APP[-1], "the app's own items are passed through as they are"


def test_history_can_be_left_out_and_nothing_added_without_a_plan():
    out = layout_messages(APP, PLAN, CODEC, history=False)
    assert [m["content"] for m in out] == ["rules", "more", "stable", "turn", "q"]
    assert layout_messages(APP, InjectionPlan(), CODEC) == APP


def test_leading_count_stops_at_the_first_non_system_message():
    assert leading_count(APP, is_system) == 2
    assert leading_count([{"role": "user"}, {"role": "system"}], is_system) == 0


def test_a_known_agents_blocks_go_inside_its_leading_system_messages():
    app = [
        {"role": "system", "content": "You are helpful.\n"},
        {"role": "developer", "content": [{"type": "text", "text": "[mem]\nnotes"}, {"type": "image"}]},
        {"role": "user", "content": "q"},
    ]
    plan = InjectionPlan(system_blocks=[SystemBlock(text="fact", cache="session_init")], profile=Sections())
    out = layout_messages(app, plan, Codec(is_system=lambda m: m["role"] != "user"))
    assert len(out) == 3 and out[0] is app[0] and out[2] is app[2]
    parts = out[1]["content"]
    assert list(out[1]) == ["role", "content"] and parts[1] is app[1]["content"][1]
    assert parts[0]["text"].startswith("[mem]\nnotes\n<memtap-memory>") and "fact" in parts[0]["text"]
    assert app[1]["content"][0] == {"type": "text", "text": "[mem]\nnotes"}  # the input is not mutated


def test_with_the_prompt_cache_per_turn_blocks_come_last():
    out = layout_messages(APP, PLAN, CODEC, cached=True)
    assert [m["content"] for m in out] == ["rules", "more", "stable", "h1", "a1", "q", "turn"]
    user_tail = Codec(tail=lambda bs: [{"role": "user", "content": "+".join(b.text for b in bs)}])
    tail = layout_messages(APP, PLAN, user_tail, cached=True)
    assert tail[-1] == {"role": "user", "content": "turn"}
