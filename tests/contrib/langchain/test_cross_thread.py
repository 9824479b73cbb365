"""The issue's promise: a fact the user stated in one thread is recalled in a new one, with
the agent state free of injected text (needs memtap's episodic memory)."""

from __future__ import annotations

from langchain_core.messages import HumanMessage
from lc_support import Ctx, agent_for, ask, system_text


def test_a_fact_stated_in_one_thread_is_recalled_in_a_new_thread(mem, model):
    agent = agent_for(model, mem)
    ctx = Ctx(user_id="carol", tenant_id="acme")
    ask(agent, "I adopted a beagle called Mochi last week", thread="first", ctx=ctx)
    mem.flush()
    state = ask(agent, "what is my beagle called?", thread="second", ctx=ctx)
    assert "Mochi" in system_text(model.calls[-1])
    asked = [m.content for m in state["messages"] if isinstance(m, HumanMessage)]
    assert asked == ["what is my beagle called?"]
