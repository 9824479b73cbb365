"""What an integration that drives calls itself (the proxy, a server) gets from a Memory and
its Tap, instead of reaching into their parts: formatting in the caller, the plugins' wire
protocols and agent profiles, the model warm-up, recall counters, and ``Tap.begin`` with
its own attribution and agent."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

import memtap
from memtap import Attribution, hookimpl
from memtap.formats.openai_chat import ChatFormatProtocol
from memtap.longterm.recall import RecallStats
from memtap.protocol.wire import InjectionPlan, InjectionRequest


class Chat(ChatFormatProtocol):
    """The chat format with no injection of its own (enough to drive a call)."""

    name = "test.chat"
    provider = "test"

    def inject(self, body: Mapping[str, Any], plan: InjectionPlan) -> Mapping[str, Any]:
        return body


class Profile:
    name = "test-agent"

    def detect(self, system: str) -> bool:
        return system.startswith("You are TestAgent")

    def split(self, system: str) -> list[Any]:
        return []

    def resolve(self, slot: str) -> str | None:
        return None


CHAT = Chat()
PROFILE = Profile()


class Recorder:
    """A plugin speaking ``test.chat``, knowing ``test-agent``, recording what injection saw."""

    def __init__(self) -> None:
        self.requests: list[InjectionRequest] = []

    @hookimpl
    def memtap_wire_protocols(self) -> list[Any]:
        return [CHAT]

    @hookimpl
    def memtap_agent_profiles(self) -> list[Any]:
        return [PROFILE]

    @hookimpl
    def memtap_request_injections(self, request: InjectionRequest) -> None:
        self.requests.append(request)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def memtap_plugins(recorder: Recorder) -> list[object]:
    """``mem`` registers the recorder."""
    return [recorder]


def body(text: str, system: str | None = None) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}] if system else []
    return {"model": "m", "messages": [*messages, {"role": "user", "content": text}]}


def answer(text: str) -> dict[str, Any]:
    return {"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


def test_format_in_caller_is_a_memory_option(recorder):
    default = memtap.Memory("memory://", entry_points=False, spool=False, embedder=False)
    assert default.format_in_caller is False
    default.close()
    mem = memtap.Memory("memory://", entry_points=False, spool=False, embedder=False, format_in_caller=True)
    assert mem.format_in_caller is True
    assert mem.writer.format_in_caller is True  # one flag, one name
    mem.format_in_caller = False
    assert mem.writer.format_in_caller is False
    mem.close()


def test_a_call_is_formatted_in_the_caller_when_asked(mem):
    mem.format_in_caller = True
    threads: list[str] = []
    original = mem.writer.submit

    def submit(item: Any) -> None:
        assert item._done  # formatted before the writer saw it
        threads.append(threading.current_thread().name)
        original(item)

    mem.writer.submit = submit  # type: ignore[method-assign]
    call = mem.tap.begin(CHAT)
    call.prepare(body("hi"))
    call.succeeded(answer("hello"), lambda r: r)
    assert threads == [threading.current_thread().name]
    assert [m.content for m in mem.history()] == ["hi", "hello"]


def test_a_call_formatted_after_its_answer_is_formatted_when_the_caller_says(mem):
    mem.format_in_caller = True
    seen: list[bool] = []
    original = mem.writer.submit

    def submit(item: Any) -> None:
        seen.append(item._done)
        original(item)

    mem.writer.submit = submit  # type: ignore[method-assign]
    call = mem.tap.begin(CHAT)
    call.format_after_answer = True
    call.prepare(body("hi"))
    call.succeeded(answer("hello"), lambda r: r)
    assert seen == [False]  # captured and queued, not formatted yet
    assert call.captured is not None and not call.captured._done
    call.format_captured()  # the answer is out
    assert call.captured._done
    call.format_captured()  # done once
    assert [m.content for m in mem.history()] == ["hi", "hello"]


def test_a_call_never_formatted_by_its_caller_is_formatted_by_the_writer(mem):
    mem.format_in_caller = True
    call = mem.tap.begin(CHAT)
    call.format_after_answer = True
    call.prepare(body("hi"))
    call.succeeded(answer("hello"), lambda r: r)
    assert mem.flush(10)
    assert [m.content for m in mem.history()] == ["hi", "hello"]
    assert [[m.content for m in e.messages] for e in mem.store.exchanges()] == [["hi", "hello"]]


def test_begin_takes_the_callers_attribution_and_agent(mem, recorder):
    with mem.scope(entity_id="scoped", session_id="scope-session"):
        bob = Attribution(entity_id="bob", session_id="s9")
        call = mem.tap.begin(CHAT, attribution=bob, agent="test-agent")
    assert call.attribution == Attribution(entity_id="bob", session_id="s9")
    sent = call.prepare(body("where am I?"))
    call.succeeded(answer("in s9"), lambda r: r)
    assert sent == body("where am I?")
    (request,) = recorder.requests
    assert request.attribution.entity_id == "bob"
    assert request.agent == "test-agent"  # named, not recognised (no system prompt here)
    assert request.history is True
    assert [m.content for m in mem.history("s9", entity_id="bob")] == ["where am I?", "in s9"]
    assert mem.history("scope-session", entity_id="scoped") == []


def test_begin_takes_a_known_profile_and_no_history(mem, recorder):
    call = mem.tap.begin(CHAT, profile=PROFILE, history=False)
    call.prepare(body("hi"))
    call.succeeded(answer("hello"), lambda r: r)
    (request,) = recorder.requests
    assert request.agent == "test-agent"
    assert request.history is False
    assert call.attribution == mem.current_attribution()  # the scope's, by default


def test_begin_with_no_profile_found_does_not_look_again(mem, recorder, monkeypatch):
    looked: list[str | None] = []
    real = mem.tap.profile
    monkeypatch.setattr(
        mem.tap, "profile", lambda agent, system: looked.append(system) or real(agent, system)
    )
    call = mem.tap.begin(CHAT, profile=None)  # the caller looked: no profile knows it
    call.prepare(body("hi", system="You are TestAgent, a helper"))
    call.succeeded(answer("hello"), lambda r: r)
    assert looked == []
    assert recorder.requests[-1].agent is None
    call = mem.tap.begin(CHAT)
    call.prepare(body("hi", system="You are TestAgent, a helper"))  # not given: found
    call.succeeded(answer("hello"), lambda r: r)
    assert looked == ["You are TestAgent, a helper"]
    assert recorder.requests[-1].agent == "test-agent"


def test_wire_protocols_and_agent_profiles_of_the_plugins(mem):
    assert mem.wire_protocols() == {"test.chat": CHAT}
    assert mem.agent_profiles() == [PROFILE]
    mem.agent_profiles().clear()  # a copy: the Memory's own list is untouched
    assert mem.agent_profiles() == [PROFILE]
    assert mem.tap.profile(None, "You are TestAgent, a helper") is PROFILE


def test_recall_stats_and_embedder(mem):
    assert mem.embedder is None
    assert mem.recall_stats() == RecallStats()
    mem.remember("Alice lives in Tokyo", entity_id="alice")
    mem.recall("where does alice live?", entity_id="alice")
    stats = mem.recall_stats()
    assert stats.searches == 1 and stats.lexical_only == 1
    mem.recall("tokyo", entity_id="alice")
    assert stats.searches == 1  # a snapshot
    assert mem.recall_stats().searches == 2


def test_warm_up_loads_the_embedders_model_in_the_background():
    loaded = threading.Event()

    class Embedder:
        name = "warm-v1"

        def warm_up(self) -> None:
            loaded.set()

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0] for _ in texts]

    emb = Embedder()
    mem = memtap.Memory("memory://", entry_points=False, spool=False, embedder=emb)
    assert mem.embedder is emb
    mem.warm_up()
    assert loaded.wait(5)
    mem.close()
