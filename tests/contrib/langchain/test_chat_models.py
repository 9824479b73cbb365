"""mem.register(ChatOpenAI(...)) captures and injects like a registered openai client, and
an agent on ChatOpenAI gets the memory block on the wire."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

import memtap
from memtap.formats.blocks import OPEN_TAG
from memtap.storage.store import InMemoryStore
from memtap_langchain import MemoryMiddleware


# Own mem: entry points loaded (the installed plugins, as an app gets them).
@pytest.fixture
def mem():
    memory = memtap.Memory(InMemoryStore())
    yield memory
    memory.close(timeout=1)


def chat(server):
    return ChatOpenAI(
        model="gpt-test", base_url=server.openai_base_url, api_key="sk-langchain-test", max_retries=0
    )


def test_registered_chat_model_gets_history_and_is_captured(server, mem):
    model = mem.register(chat(server))
    with mem.scope(entity_id="lc", session_id="lc-1"):
        assert model.invoke("I live in Kyoto").content == "You said: I live in Kyoto"
        model.invoke("where do I live?")
    sent = [(m["role"], m["content"]) for m in server.last_json()["messages"]]
    assert sent == [
        ("user", "I live in Kyoto"),
        ("assistant", "You said: I live in Kyoto"),
        ("user", "where do I live?"),
    ]
    assert [m.content for m in mem.history("lc-1")] == [
        "I live in Kyoto",
        "You said: I live in Kyoto",
        "where do I live?",
        "You said: where do I live?",
    ]


def test_registered_chat_model_streams_and_async(server, mem):
    model = mem.register(chat(server))
    with mem.scope(session_id="lc-stream"):
        text = "".join(chunk.content for chunk in model.stream("stream this"))
    assert text == "You said: stream this"

    import asyncio

    async def main():
        with mem.scope(session_id="lc-async"):
            return (await model.ainvoke("async hello")).content

    assert asyncio.run(main()) == "You said: async hello"
    assert [m.content for m in mem.history("lc-stream")] == ["stream this", "You said: stream this"]
    assert [m.content for m in mem.history("lc-async")] == ["async hello", "You said: async hello"]


def test_unregister_restores_the_chat_model(server, mem):
    model = chat(server)
    root_client = model.root_client
    mem.register(model)
    mem.unregister(model)
    assert "create" not in vars(root_client.chat.completions)
    with mem.scope(session_id="lc-off"):
        model.invoke("untracked")
    assert mem.history("lc-off") == []


def test_a_client_the_app_registered_itself_stays_registered(server, mem):
    model = chat(server)
    mem.register(model.root_client)
    mem.register(model)
    mem.unregister(model)
    assert "create" in vars(model.root_client.chat.completions)


@dataclass
class Ctx:
    user_id: str


def test_agent_on_chat_openai_gets_the_memory_block_on_the_wire(server, mem):
    mem.remember("Ivy's favourite colour is teal", entity_id="ivy")
    agent = create_agent(model=chat(server), middleware=[MemoryMiddleware(mem)], context_schema=Ctx)
    state = agent.invoke(
        {"messages": [HumanMessage("what is my favourite colour?")]},
        config={"configurable": {"thread_id": "wire"}},
        context=Ctx(user_id="ivy"),
    )
    system = [m["content"] for m in server.last_json()["messages"] if m["role"] == "system"]
    assert len(system) == 1 and OPEN_TAG in system[0] and "teal" in system[0]
    assert all(OPEN_TAG not in str(m.content) for m in state["messages"])
