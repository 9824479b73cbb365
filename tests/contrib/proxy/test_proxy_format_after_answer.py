"""The proxy formats a finished call after its answer is out, not before (issue 37).

A call is journaled before the bytes that complete its answer go out (journaled before
answered). Formatting it into its exchange (the formatter hooks, the redaction, the record
of what was injected) is not needed for that: on a store no other process shares, the
client gets the answer first and the call is formatted right after, on the same thread.
Before, the formatting ran between the journal and the send: for an answer that arrives in
one piece (a short one, any JSON answer) every request's first byte waited for it.

Each answer shape is tried with a formatter that holds its thread until the client has the
answer (or :data:`HOLD` seconds): formatted first, the answer could not arrive before that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import httpx
import pytest
from proxy_support import provider_plugins

import memtap
from memtap.hookspecs import hookimpl
from memtap.testing.server import Reply, ScriptedModelServer
from memtap.testing.timing import slack
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

#: How long the formatter waits for the client to have its answer (seconds).
HOLD = 3.0


class HeldFormatter:
    """Formats nothing until the test says the client has its answer (or ``HOLD`` s)."""

    def __init__(self) -> None:
        self.answered = threading.Event()
        self.formatted: list[bool] = []  # whether the client had its answer by then

    @hookimpl(wrapper=True)
    def memtap_format_exchange(self, raw: Any) -> Generator[None, Any, Any]:
        self.formatted.append(self.answered.wait(slack(HOLD)))
        return (yield)


@pytest.fixture
def formatter() -> HeldFormatter:
    return HeldFormatter()


@pytest.fixture
def memtap_plugins(formatter: HeldFormatter) -> list[object]:
    return [*provider_plugins(), formatter]


@pytest.fixture
def proxy(upstream: ScriptedModelServer, mem: memtap.Memory) -> Iterator[ProxyThread]:
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


CHAT = ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}]})
MESSAGES = (
    "/v1/messages",
    {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "What is 2+2?"}]},
)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("route", [CHAT, MESSAGES], ids=["openai", "anthropic"])
def test_the_client_has_its_answer_before_the_call_is_formatted(
    proxy: ProxyThread,
    upstream: ScriptedModelServer,
    mem: memtap.Memory,
    formatter: HeldFormatter,
    route: tuple[str, dict[str, Any]],
    stream: bool,
) -> None:
    path, body = route
    upstream.script(Reply(text="It is 4."))
    started = time.perf_counter()
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", proxy.url + path, json={**body, "stream": stream}) as response,
    ):
        answer = response.read()
    took = time.perf_counter() - started
    formatter.answered.set()
    assert response.status_code == 200
    assert b"4." in answer
    # Formatted first, the answer would have waited out the whole hold.
    assert took < slack(HOLD) / 2, f"the answer waited {took:.2f} s for its call to be formatted"
    # Formatted after the answer, and stored as always.
    assert mem.flush(slack(30))
    assert formatter.formatted == [True]
    (stored,) = mem.store.exchanges()
    assert [m.content for m in stored.messages] == ["What is 2+2?", "It is 4."]
