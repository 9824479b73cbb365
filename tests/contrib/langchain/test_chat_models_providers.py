"""Every LangChain chat model the docs name, registered with ``mem.register(model)``, is
injected and captured on ``invoke``, ``stream``, ``ainvoke`` and ``astream``: real
LangChain integrations and SDKs against the local scripted server (OpenAI chat, Anthropic
messages, Gemini generateContent; ChatLiteLLM through litellm's ``openai/`` provider).

ChatAnthropic calls ``messages.with_raw_response.create(...)`` (and streams with
``stream=True`` + ``parse()``); ChatOpenAI does the same with ``include_response_headers``.
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import

import openai
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_google_genai import ChatGoogleGenerativeAI
from langchain_litellm import ChatLiteLLM
from langchain_openai import ChatOpenAI

import memtap_anthropic
import memtap_google
import memtap_langchain.plugin
import memtap_litellm
import memtap_openai

PLUGINS = [memtap_openai, memtap_anthropic, memtap_google, memtap_litellm, memtap_langchain.plugin]


@pytest.fixture
def memtap_plugins() -> list[object]:
    return PLUGINS


def chat_openai(server, **options):
    # Its own async HTTP client: langchain-openai shares a default one per base URL, whose
    # connections would belong to the event loop of an earlier asyncio.run().
    return ChatOpenAI(
        model="gpt-test",
        base_url=server.openai_base_url,
        api_key="sk-lc-test",
        max_retries=0,
        http_async_client=openai.DefaultAsyncHttpxClient(),
        **options,
    )


#: name -> (how to make the model for the server, the wire protocol its calls use)
MODELS = {
    "ChatOpenAI": (chat_openai, "openai.chat"),
    # with include_response_headers it calls through with_raw_response (streams too)
    "ChatOpenAI-raw": (lambda s: chat_openai(s, include_response_headers=True), "openai.chat"),
    "ChatAnthropic": (
        lambda s: ChatAnthropic(
            model="claude-test", base_url=s.anthropic_base_url, api_key="sk-ant-lc-test", max_retries=0
        ),
        "anthropic.messages",
    ),
    "ChatGoogleGenerativeAI": (
        lambda s: ChatGoogleGenerativeAI(
            model="gemini-test", google_api_key="lc-test-key", base_url=s.gemini_base_url, max_retries=0
        ),
        "google.generate_content",
    ),
    "ChatLiteLLM": (
        lambda s: ChatLiteLLM(model="openai/gpt-test", api_base=s.openai_base_url, api_key="sk-lc-test"),
        "litellm.chat",
    ),
}


def protocol(mem, name):
    return next(p for group in mem.pm.hook.memtap_wire_protocols() for p in group if p.name == name)


def sent(mem, server, name):
    """The (role, text) of every message of the last request, as its protocol reads it."""
    view = protocol(mem, name).read_request(server.last_json())
    return [(m.role, m.content) for m in view.messages]


def text(chunks):
    return "".join(c.content if isinstance(c.content, str) else c.text for c in chunks)


@pytest.mark.parametrize("which", sorted(MODELS))
def test_invoke_stream_and_async_forms_are_injected_and_captured(server, mem, which):
    make, wire = MODELS[which]
    server.clear()
    model = mem.register(make(server))
    expected: list[tuple[str, str]] = []

    def turn(user: str, answer: str) -> None:
        # The request carried every earlier turn (history), then the new one.
        assert sent(mem, server, wire) == [*expected, ("user", user)], user
        assert answer == f"You said: {user}"
        expected.extend([("user", user), ("assistant", answer)])

    with mem.scope(entity_id="lc", session_id=f"lc-{which}"):
        turn("invoked", model.invoke("invoked").content)
        turn("streamed", text(model.stream("streamed")))

        async def main() -> tuple[str, str]:
            first = (await model.ainvoke("async invoked")).content
            turn("async invoked", first)
            second = text([chunk async for chunk in model.astream("async streamed")])
            turn("async streamed", second)
            return first, second

        asyncio.run(main())
    assert [(m.role, m.content) for m in mem.history(f"lc-{which}")] == expected
    exchanges = sorted(mem.store.exchanges(session_id=f"lc-{which}"), key=lambda e: e.started_at)
    assert [e.stream for e in exchanges] == [False, True, False, True]
    assert all(e.status == "ok" and e.attribution.entity_id == "lc" for e in exchanges)
    # Unregistering the model restores its clients: nothing more is injected or stored.
    mem.unregister(model)
    with mem.scope(entity_id="lc", session_id=f"lc-{which}-off"):
        assert model.invoke("untapped").content == "You said: untapped"
    assert sent(mem, server, wire) == [("user", "untapped")]
    assert mem.history(f"lc-{which}-off") == []
