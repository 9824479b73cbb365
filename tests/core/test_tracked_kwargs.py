"""``memtap.sdk.tracked_kwargs`` and the defaults of ``memtap.sdk.ChatFormatProtocol``: a
plugin for an OpenAI-compatible SDK is a protocol with a name and one wrapped method.

The SDK here is the shape ``plugins/_template`` supports: ``chat(**fields)`` sends its
keyword arguments as the request JSON to the local scripted server with httpx and returns
the response JSON, or an iterator (async iterator) of the stream's events.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

import memtap
from memtap.sdk import ChatFormatProtocol, InjectionPlan, Message, Patches, SystemBlock, Tap, tracked_kwargs
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import Reply


class SdkError(Exception):
    """An HTTP error (``status_code``, as most SDKs carry it)."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def _event(line: str) -> Any:
    return json.loads(line[6:]) if line.startswith("data: ") and line != "data: [DONE]" else None


class Client:
    """``chat(**fields)``: the fields are the body; JSON back, or an iterator of events."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=10)

    def chat(self, **fields: Any) -> Any:
        request = self.http.build_request("POST", "/chat/completions", json=fields)
        response = self.http.send(request, stream=bool(fields.get("stream")))
        if response.status_code != 200:
            response.read()
            raise SdkError(response.status_code)
        return self._events(response) if fields.get("stream") else response.json()

    @staticmethod
    def _events(response: httpx.Response) -> Iterator[Any]:
        try:
            for line in response.iter_lines():
                if (event := _event(line)) is not None:
                    yield event
        finally:
            response.close()


class AsyncClient:
    """The same, asynchronous (a connection per call: each test runs its own loop)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def chat(self, **fields: Any) -> Any:
        http = httpx.AsyncClient(base_url=self.base_url, timeout=10)
        request = http.build_request("POST", "/chat/completions", json=fields)
        response = await http.send(request, stream=bool(fields.get("stream")))
        if response.status_code != 200:
            await response.aread()
            await http.aclose()
            raise SdkError(response.status_code)
        if not fields.get("stream"):
            data = response.json()
            await http.aclose()
            return data
        return self._events(http, response)

    @staticmethod
    async def _events(http: httpx.AsyncClient, response: httpx.Response) -> AsyncIterator[Any]:
        try:
            async for line in response.aiter_lines():
                if (event := _event(line)) is not None:
                    yield event
        finally:
            await response.aclose()
            await http.aclose()


class Proto(ChatFormatProtocol):
    """Nothing but a name: every other part of the protocol is the chat format's default."""

    name = "kw.chat"
    provider = "kw"


PROTOCOL = Proto()


class Adapter:
    provider = "kw"

    def install(self, client: Any, tap: Tap) -> Callable[[], None]:
        patches = Patches()
        patches.wrap(client, "chat", lambda chat: tracked_kwargs(chat, tap, PROTOCOL, what="kw"))
        return patches.restore


class Plugin:
    @memtap.hookimpl
    def memtap_match_client(self, client: Any) -> Adapter | None:
        return Adapter() if isinstance(client, (Client, AsyncClient)) else None

    @memtap.hookimpl
    def memtap_wire_protocols(self) -> list[Any]:
        return [PROTOCOL]


# Own mem: this module's plugin, and the spool on (captured calls go through the journal as shipped).
@pytest.fixture
def mem() -> Iterator[memtap.Memory]:
    memory = memtap.Memory("memory://", plugins=[Plugin()], entry_points=False)
    yield memory
    memory.close()


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _text(events: list[Any]) -> str:
    return "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e["choices"])


def _sent(memtap_server: Any) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in memtap_server.last_json()["messages"]]


def test_history_is_injected_through_the_keyword_arguments_and_streams_observed(mem, memtap_server):
    client = mem.register(Client(memtap_server.openai_base_url))
    memtap_server.script(Reply(text="hello Ada", input_tokens=7, output_tokens=2))
    with mem.scope(entity_id="kw", session_id="sync"):
        assert client.chat(model="m", messages=user("I am Ada"))["choices"][0]["message"]["content"]
        events = list(client.chat(model="m", messages=user("who am I?"), stream=True))
    assert _sent(memtap_server) == [("user", "I am Ada"), ("assistant", "hello Ada"), ("user", "who am I?")]
    assert memtap_server.last_json()["stream_options"] == {"include_usage": True}
    # the events memtap asked for are hidden: the app sees what it would have seen without it
    assert events and all(e["choices"] and "usage" not in e for e in events)
    assert _text(events) == "You said: who am I?"
    history = [(m.role, m.content) for m in mem.history("sync", entity_id="kw")]
    assert history[2:] == [("user", "who am I?"), ("assistant", "You said: who am I?")]
    assert mem.flush(timeout=10)
    exchanges = list(mem.store.exchanges(session_id="sync"))
    assert [(e.usage.input_tokens, e.usage.output_tokens) for e in exchanges if not e.stream] == [(7, 2)]
    assert exchanges[-1].stream and exchanges[-1].status == "ok"


def test_the_async_method_is_tracked_streamed_and_not(mem, memtap_server):
    async def main() -> list[str]:
        client = mem.register(AsyncClient(memtap_server.openai_base_url))
        with mem.scope(entity_id="kw", session_id="async"):
            plain = await client.chat(model="m", messages=user("one"))
            stream = await client.chat(model="m", messages=user("two"), stream=True)
            events = [e async for e in stream]
        return [plain["choices"][0]["message"]["content"], _text(events)]

    assert asyncio.run(main()) == ["You said: one", "You said: two"]
    assert _sent(memtap_server) == [("user", "one"), ("assistant", "You said: one"), ("user", "two")]
    assert [m.content for m in mem.history("async")] == ["one", "You said: one", "two", "You said: two"]


def test_a_rejection_of_the_injection_is_sent_again_with_the_app_arguments(mem, memtap_server):
    client = mem.register(Client(memtap_server.openai_base_url))
    with mem.scope(entity_id="kw", session_id="resend"):
        client.chat(model="m", messages=user("first"))
        memtap_server.script(Reply(status=400, text="rejected"))
        before = len(memtap_server.requests)
        answer = client.chat(model="m", messages=user("second"), temperature=0)
    rejected, resent = [r.json for r in list(memtap_server.requests)[before:]]
    assert len(rejected["messages"]) == 3
    assert resent == {"model": "m", "messages": user("second"), "temperature": 0}
    assert answer["choices"][0]["message"]["content"] == "You said: second"


def test_an_abandoned_stream_is_captured_once_as_partial(mem, memtap_server):
    client = mem.register(Client(memtap_server.openai_base_url))
    memtap_server.script(Reply(text="a b c d e f", chunks=6))
    with mem.scope(entity_id="kw", session_id="break"):
        for _event in client.chat(model="m", messages=user("go"), stream=True):
            break
        collect_garbage()
    assert mem.flush(timeout=10)
    (exchange,) = mem.store.exchanges(session_id="break")
    assert exchange.status == "partial"


def test_unregister_gives_back_the_method_itself(mem, memtap_server):
    client = Client(memtap_server.openai_base_url)
    mem.register(client)
    assert "chat" in vars(client)
    mem.unregister(client)
    assert "chat" not in vars(client)


def test_the_chat_protocol_injects_by_default():
    """A subclass that only names itself injects after the app's system message the
    history, then the per-turn blocks, then the app's turn; nothing else in the body changes."""
    body = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, *user("hi")], "n": 1}
    plan = InjectionPlan(
        history=[Message(role="user", content="earlier"), Message(role="assistant", content="ok")],
        system_blocks=[SystemBlock(text="likes tea", source="facts")],
    )
    out = PROTOCOL.inject(body, plan)
    roles = [(m["role"], m["content"]) for m in out["messages"]]
    assert roles[0] == ("system", "be brief")
    assert roles[1:3] == [("user", "earlier"), ("assistant", "ok")]
    assert roles[3][0] == "system" and "likes tea" in roles[3][1]
    assert roles[4:] == [("user", "hi")]
    assert {k: v for k, v in out.items() if k != "messages"} == {"model": "m", "n": 1}
    assert body["messages"][1:] == user("hi")  # the app's body is left as it was


def test_caller_event_hides_what_memtap_asked_for():
    usage = {"prompt_tokens": 1, "completion_tokens": 1}
    assert PROTOCOL.caller_event({"choices": [], "usage": usage}) is None
    assert PROTOCOL.caller_event({"id": "c", "choices": [{"index": 0}], "usage": None}) == {
        "id": "c",
        "choices": [{"index": 0}],
    }
    event = {"choices": [{"index": 0}], "usage": usage}
    assert PROTOCOL.caller_event(event) is event
