"""Shared pieces of the memtap-langchain tests: a recording fake chat model (LangChain's own
fake-model pattern), the runtime context, and agent helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from memtap.storage.store import InMemoryStore, StoreError
from memtap_langchain import MemoryMiddleware


class RecordingChatModel(BaseChatModel):
    """A fake chat model (LangChain's pattern) that records every call's messages."""

    calls: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "recording-fake"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any):
        self.calls.append(list(messages))
        last = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        answer = AIMessage(content=f"You said: {last.content}")
        return ChatResult(generations=[ChatGeneration(message=answer)])


@dataclass
class Ctx:
    user_id: str
    tenant_id: str | None = None
    memtap: bool = True


class BrokenStore(InMemoryStore):
    def write_exchanges(self, exchanges):
        raise StoreError("down")

    def facts(self, **kwargs):
        raise StoreError("down")


def agent_for(model, mem, **options):
    return create_agent(
        model=model,
        middleware=[MemoryMiddleware(mem, **options)],
        context_schema=Ctx,
        checkpointer=InMemorySaver(),
    )


def ask(agent, text, *, thread, ctx):
    return agent.invoke(
        {"messages": [HumanMessage(text)]}, config={"configurable": {"thread_id": thread}}, context=ctx
    )


def system_text(call: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in call if isinstance(m, SystemMessage))
