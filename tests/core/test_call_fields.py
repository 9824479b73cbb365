"""What an adapter records on a ``Call`` is a declared, typed field, not an ad-hoc attribute:
``owner`` (the client the call was made through), ``url_model`` (a model the request
names in its URL rather than its body, as Gemini's do) and ``adapter_state`` (what the
adapter keeps between the steps of its tracked method)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import memtap
from memtap.sdk import Call, ChatFormatProtocol, InjectionPlan


class Chat(ChatFormatProtocol):
    """The chat format with no injection of its own (enough to drive a call)."""

    name = "test.chat"
    provider = "test"

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> Mapping[str, Any]:
        return body


def test_a_call_begins_with_no_owner_and_no_url_model():
    mem = memtap.Memory("memory://", plugins=[], entry_points=False)
    try:
        call = mem.tap.begin(Chat())
        assert isinstance(call, Call)
        assert call.owner is None
        assert call.url_model is None
        assert call.adapter_state is None
        client = object()
        call.owner = client
        call.url_model = "gemini-2.5-flash"
        call.prepare({"messages": [{"role": "user", "content": "hi"}]})
        call.succeeded({"choices": [{"message": {"role": "assistant", "content": "hello"}}]}, lambda r: r)
        assert call.owner is client
        assert [m.content for m in mem.history()] == ["hi", "hello"]
    finally:
        mem.close()
