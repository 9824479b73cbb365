"""Recall never blocks the proxy's event loop (issue 37).

A question that the words and the quick vector cannot settle waits for the full model's
vector (``RecallBudget.model_wait``). On an event loop that wait is awaited
(``memtap_request_prefetch``): the request still gets what the full model finds, and
every other request the loop serves meanwhile goes on. Before, the loop blocked in the
wait, and each request behind it waited too.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import memtap
from memtap.hookspecs import hookimpl
from memtap.longterm.recall_injector import RecallBudget
from memtap.protocol.wire import InjectionRequest, SystemBlock
from memtap.testing.server import Reply, ScriptedModelServer
from memtap.testing.timing import eventually, slack
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

CHAT = "/v1/chat/completions"
#: The full model's wait allowed per call: long, so that a blocked loop is unmistakable.
MODEL_WAIT = 3.0
GROUPS = [{"dog", "beagle", "puppy", "pet"}, {"coffee", "tea", "drink"}]


def meaning(text: str) -> list[float]:
    words = set(text.lower().replace("?", " ").replace(".", " ").split())
    return [float(len(words & g)) for g in GROUPS] + [0.01]


class GatedEmbedder:
    """The full model knows the word groups; its queries wait for ``gate`` once it is set
    up (documents, embedded before, do not). The quick path knows nothing, so a question
    in other words than its fact needs the full model."""

    name = "gated-v1"

    def __init__(self) -> None:
        self.gate: threading.Event | None = None
        self.waiting = threading.Event()

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self.gate is not None and any(t.endswith("?") for t in texts):
            self.waiting.set()
            self.gate.wait(30)
        return [meaning(t) for t in texts]

    def quick_query(self, text: str) -> list[float]:
        return [0.0, 0.0, 1.0]


@pytest.fixture
def embedder() -> GatedEmbedder:
    return GatedEmbedder()


@pytest.fixture
def memtap_memory_options(embedder: GatedEmbedder) -> dict[str, Any]:
    return {"embedder": embedder, "recall": RecallBudget(deadline=MODEL_WAIT + 1, model_wait=MODEL_WAIT)}


@pytest.fixture
def proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    config = ProxyConfig(openai_upstream=upstream.base_url, session_id="default")
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


def ask(proxy: ProxyThread, entity: str, text: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return httpx.post(proxy.url + CHAT, json=body, headers={"x-memtap-entity": entity}, timeout=30)


def test_a_call_waiting_for_the_full_model_does_not_hold_up_the_others(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory, embedder: GatedEmbedder
) -> None:
    mem.remember("Alice adopted a beagle", entity_id="alice")
    mem.recall("warm up", entity_id="alice")  # the index loaded and its fact embedded
    mem.recall("warm up", entity_id="bob")
    embedder.gate = threading.Event()
    upstream.script(Reply(text="ok"), Reply(text="ok"))

    answered: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: answered.append(ask(proxy, "alice", "which pet do I own?")))
    waiting.start()
    try:
        assert embedder.waiting.wait(slack(10)), "the question never asked the full model"
        # Alice's call waits for the model now; Bob's, on the same loop, must not.
        started = time.perf_counter()
        other = ask(proxy, "bob", "hello there")
        took = time.perf_counter() - started
        assert other.status_code == 200
        assert took < MODEL_WAIT / 2, f"a call waited {took:.2f} s behind another call's query embedding"
    finally:
        embedder.gate.set()
        waiting.join(30)
    # Alice's call still got what the full model found, in its own request.
    (response,) = answered
    assert response.status_code == 200
    eventually(lambda: len(upstream.requests) == 2)
    sent = next(r.json for r in upstream.requests if "pet" in str(r.json["messages"]))
    assert "Alice adopted a beagle" in str(sent["messages"]), "the call did not wait for its full vector"


class TicketPlugin:
    """A third-party injector that looks something up asynchronously in its prefetch and
    hands it to its injections through a ContextVar (the hook's documented contract)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.ticket: contextvars.ContextVar[str | None] = contextvars.ContextVar("ticket", default=None)

    @hookimpl
    def memtap_request_prefetch(self, request: InjectionRequest) -> Any:
        async def look_up() -> None:
            await asyncio.sleep(0.01)  # a remote lookup
            if self.fail:
                raise RuntimeError("the lookup service is down")
            self.ticket.set(f"ticket for {request.attribution.entity_id}")

        return look_up()

    @hookimpl
    def memtap_request_injections(self, request: InjectionRequest) -> list[SystemBlock]:
        ticket = self.ticket.get()
        return [SystemBlock(text=ticket, slot="task_context", source="tickets")] if ticket else []


@pytest.mark.parametrize("fail", [False, True], ids=["looked-up", "lookup-fails"])
def test_a_plugins_prefetch_is_awaited_in_the_calls_task_and_a_failure_is_fail_open(
    proxy: ProxyThread, upstream: ScriptedModelServer, mem: memtap.Memory, fail: bool
) -> None:
    mem.pm.register(TicketPlugin(fail=fail), name="tickets")
    upstream.script(Reply(text="ok"))
    response = ask(proxy, "carol", "what is on my plate today")
    assert response.status_code == 200
    sent = str(upstream.requests[-1].json)
    assert ("ticket for carol" in sent) is not fail
