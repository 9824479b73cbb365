"""``memtap.sdk.tracked``: one wrapper for a tracked SDK method, in the method's own form.

Each behaviour is checked in the four forms an SDK method has (a plain function, a
coroutine function, a generator function, an async generator function): with the kit SDK
of ``kit_support`` against the local scripted server (history injected and captured, a
rejection of memtap's change sent again as the app built it, an early break), and with
bare functions for what must pass through unchanged (the app's own errors, the result
when memtap's own code fails).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
from kit_support import KIT, AsyncKitClient, KitClient, KitError, KitPlugin, outcome

import memtap
from memtap.sdk import Call, tracked
from memtap.testing.server import Reply
from memtap.workers.background import calls_in_flight

FORMS = ("sync", "async", "stream", "astream")
IS_ASYNC = {"sync": False, "async": True, "stream": False, "astream": True}
STREAMED = {"sync": False, "async": False, "stream": True, "astream": True}


# Own mem: the kit plugin, and the spool on (captured calls go through the journal as shipped).
@pytest.fixture
def mem() -> Iterator[memtap.Memory]:
    memory = memtap.Memory("memory://", plugins=[KitPlugin()], entry_points=False)
    yield memory
    memory.close()


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _delta(event: Mapping[str, Any]) -> str:
    return "".join((c.get("delta") or {}).get("content") or "" for c in event.get("choices") or ())


def send(client: Any, form: str, text: str, *, stop_after: int | None = None) -> str:
    """One user turn through the method of ``form``; the answer text (``stop_after``:
    leave a stream after that many events)."""
    if form == "sync":
        return str(client.chat(messages=user(text))["choices"][0]["message"]["content"])
    if form == "async":
        return asyncio.run(_send_async(client, text))
    if form == "stream":
        parts = []
        stream = client.chat_stream(messages=user(text))
        for i, event in enumerate(stream):
            if stop_after is not None and i == stop_after:
                stream.close()  # the app's break, closed at once
                break
            parts.append(_delta(event))
        return "".join(parts)
    return asyncio.run(_send_astream(client, text, stop_after))


async def _send_async(client: Any, text: str) -> str:
    return str((await client.chat(messages=user(text)))["choices"][0]["message"]["content"])


async def _send_astream(client: Any, text: str, stop_after: int | None) -> str:
    parts = []
    stream = client.chat_stream(messages=user(text))
    i = 0
    async for event in stream:
        if stop_after is not None and i == stop_after:
            break
        parts.append(_delta(event))
        i += 1
    await stream.aclose()
    return "".join(parts)


def make_client(memtap_server: Any, form: str) -> Any:
    cls = AsyncKitClient if IS_ASYNC[form] else KitClient
    return cls(memtap_server.openai_base_url)


def method(client: Any, form: str) -> Any:
    return client.chat_stream if STREAMED[form] else client.chat


def stored(mem: memtap.Memory, session: str) -> list[tuple[str, str]]:
    mem.flush()
    return [(m.role, m.content) for m in mem.history(session_id=session)]


# -- the form ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_the_wrapper_has_the_form_of_the_method(mem, memtap_server, form):
    client = make_client(memtap_server, form)
    original = method(client, form)
    mem.register(client)
    wrapper = method(client, form)
    assert wrapper is not original
    kinds = (
        inspect.iscoroutinefunction,
        inspect.isgeneratorfunction,
        inspect.isasyncgenfunction,
    )
    assert [kind(wrapper) for kind in kinds] == [kind(original) for kind in kinds]
    assert wrapper.__name__ == original.__name__ and wrapper.__wrapped__ == original


# -- through the kit SDK ---------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_each_form_injects_history_and_captures_the_turn(mem, memtap_server, form):
    client = mem.register(make_client(memtap_server, form))
    with mem.scope(session_id=form):
        assert send(client, form, "one") == "You said: one"
        assert send(client, form, "two") == "You said: two"
    sent = [m["content"] for m in memtap_server.last_json()["messages"]]
    assert sent == ["one", "You said: one", "two"]  # the first turn injected
    assert stored(mem, form) == [
        ("user", "one"),
        ("assistant", "You said: one"),
        ("user", "two"),
        ("assistant", "You said: two"),
    ]


@pytest.mark.parametrize("form", FORMS)
def test_the_apps_errors_reach_it_as_a_bare_client_raises_them(mem, memtap_server, form):
    memtap_server.script(Reply(status=500, text="overloaded"))
    with pytest.raises(KitError) as bare:
        send(make_client(memtap_server, form), form, "one")
    client = mem.register(make_client(memtap_server, form))
    memtap_server.script(Reply(status=500, text="overloaded"))
    with mem.scope(session_id=form), pytest.raises(KitError) as tapped:
        send(client, form, "one")
    assert str(tapped.value) == str(bare.value) and tapped.value.status_code == 500
    assert len(memtap_server.requests) == 2  # one each: a server error is never sent again
    assert stored(mem, form) == []


@pytest.mark.parametrize("form", FORMS)
def test_a_rejection_of_what_memtap_changed_is_sent_again_as_the_app_built_it(mem, memtap_server, form):
    client = mem.register(make_client(memtap_server, form))
    with mem.scope(session_id=form):
        send(client, form, "one")
        memtap_server.script(Reply(status=400, text="invalid messages"))
        assert send(client, form, "two") == "You said: two"
    rejected, again = (r.json for r in memtap_server.requests[-2:])
    assert [m["content"] for m in rejected["messages"]] == ["one", "You said: one", "two"]
    expected = {"model": "kit-1", "messages": user("two")}
    assert again == ({**expected, "stream": True} if STREAMED[form] else expected)
    assert [content for _, content in stored(mem, form)] == ["one", "You said: one", "two", "You said: two"]


@pytest.mark.parametrize("form", ["stream", "astream"])
def test_a_stream_left_early_is_captured_once_as_partial(mem, memtap_server, form):
    memtap_server.script(Reply(text="one two three four five six", chunks=6))
    client = mem.register(make_client(memtap_server, form))
    with mem.scope(session_id=form):
        send(client, form, "go", stop_after=2)
    mem.flush()
    (exchange,) = mem.store.exchanges(session_id=form)
    assert exchange.status == "partial"


# -- with bare functions: what passes through unchanged ---------------------------------------


def originals(value: Any = None, error: BaseException | None = None) -> dict[str, Callable[..., Any]]:
    """A function of each form that returns (or yields) ``value``, or raises ``error``."""

    def sync(**kwargs: Any) -> Any:
        if error is not None:
            raise error
        return value

    async def coro(**kwargs: Any) -> Any:
        if error is not None:
            raise error
        return value

    def gen(**kwargs: Any) -> Iterator[Any]:
        if error is not None:
            raise error
        yield value

    async def agen(**kwargs: Any) -> AsyncIterator[Any]:
        if error is not None:
            raise error
        yield value

    return {"sync": sync, "async": coro, "stream": gen, "astream": agen}


def invoke(wrapper: Callable[..., Any], form: str, text: str = "hi") -> Any:
    """Call ``wrapper`` as the app would; its result (a stream's items as a list)."""
    if form == "sync":
        return wrapper(messages=user(text))
    if form == "async":
        return asyncio.run(wrapper(messages=user(text)))
    if form == "stream":
        return list(wrapper(messages=user(text)))

    async def read() -> list[Any]:
        return [item async for item in wrapper(messages=user(text))]

    return asyncio.run(read())


def beginner(mem: memtap.Memory) -> Callable[[tuple[Any, ...], dict[str, Any]], Call]:
    def begin(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        return mem.tap.begin(KIT, fallback_body={"model": "kit-1", **kwargs})

    return begin


@pytest.mark.parametrize("form", FORMS)
def test_the_apps_own_exception_is_raised_as_the_same_object(mem, form):
    error = KitError(401, "bad key")
    wrapper = tracked(originals(error=error)[form], beginner(mem), outcome)
    with pytest.raises(KitError) as raised:
        invoke(wrapper, form)
    assert raised.value is error
    mem.flush()
    assert list(mem.store.exchanges()) == []


@pytest.mark.parametrize("form", FORMS)
def test_a_begin_that_raises_leaves_the_call_untracked(mem, form, caplog):
    answer = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}

    def broken(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        raise RuntimeError("memtap bug")

    wrapper = tracked(originals(answer)[form], broken, outcome, what="kit")
    with caplog.at_level(logging.ERROR, logger="memtap.adapters.tracked"):
        result = invoke(wrapper, form)
    assert result == ([answer] if STREAMED[form] else answer)
    assert "could not start tracking a kit call; it proceeds untracked" in caplog.text


@pytest.mark.parametrize("form", FORMS)
def test_an_outcome_that_raises_leaves_the_result_as_the_sdk_returned_it(mem, form, caplog):
    answer = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}

    def broken(call: Call, result: Any) -> Any:
        raise RuntimeError("memtap bug")

    wrapper = tracked(originals(answer)[form], beginner(mem), broken, what="kit")
    in_flight = calls_in_flight()
    with caplog.at_level(logging.ERROR, logger="memtap.adapters.tracked"):
        result = invoke(wrapper, form)
    if form == "sync":
        assert result is answer
    else:
        assert result == ([answer] if STREAMED[form] else answer)
    assert "could not capture a kit response" in caplog.text
    assert calls_in_flight() == in_flight  # the call ended all the same


@pytest.mark.parametrize("form", FORMS)
def test_a_begin_that_returns_none_passes_the_call_through(mem, form):
    answer = {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
    wrapper = tracked(originals(answer)[form], lambda args, kwargs: None, outcome)
    assert invoke(wrapper, form) == ([answer] if STREAMED[form] else answer)
    mem.flush()
    assert list(mem.store.exchanges()) == []


@pytest.mark.parametrize("form", ["sync", "async"])
def test_an_attempt_that_injects_through_the_arguments(mem, form):
    """An SDK with no body step (litellm, boto3): ``attempt`` prepares the fallback body
    and calls the method with the body to send."""
    seen: list[dict[str, Any]] = []

    def respond(kwargs: dict[str, Any]) -> dict[str, Any]:
        seen.append(kwargs)
        text = f"You said: {kwargs['messages'][-1]['content']}"
        return {"choices": [{"message": {"role": "assistant", "content": text}}]}

    def sync(**kwargs: Any) -> Any:
        return respond(kwargs)

    async def coro(**kwargs: Any) -> Any:
        return respond(kwargs)

    original = sync if form == "sync" else coro

    def attempt(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert call.app_body is not None
        return original(**call.prepare(call.app_body))

    wrapper = tracked(original, beginner(mem), outcome, attempt=attempt)
    with mem.scope(session_id="args"):
        invoke(wrapper, form, "one")
        invoke(wrapper, form, "two")
    assert [m["content"] for m in seen[-1]["messages"]] == ["one", "You said: one", "two"]
    assert len(stored(mem, "args")) == 4
