"""The user's call never fails because of memtap, nothing captured is lost while the store
is down, many threads never mix scopes, and no secret reaches the store or a span."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from openai_support import API_KEY, user

import memtap
import memtap_openai
from memtap import hookimpl
from memtap.storage.store import InMemoryStore, StoreError
from memtap.testing.server import Reply
from memtap.testing.timing import slack


class FlakyStore(InMemoryStore):
    """A real in-memory store whose writes and reads can be switched off."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.slow = 0.0
        self.write_attempts = 0

    def write_exchanges(self, exchanges):
        self.write_attempts += 1
        if self.down:
            raise StoreError("database is down")
        super().write_exchanges(exchanges)

    def history(self, session_id, *, entity_id=None, limit=None):
        if self.down:
            raise StoreError("database is down")
        time.sleep(self.slow)
        return super().history(session_id, entity_id=entity_id, limit=limit)


@pytest.fixture
def flaky():
    return FlakyStore()


@pytest.fixture
def flaky_mem(flaky):
    mem = memtap.Memory(flaky, plugins=[memtap_openai], entry_points=False)
    yield mem
    mem.close(timeout=1)


def test_store_down_never_fails_the_call_and_nothing_is_lost(flaky, flaky_mem, server, caplog):
    client = flaky_mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    flaky.down = True
    with flaky_mem.scope(session_id="outage"):
        for i in range(5):
            reply = client.chat.completions.create(model="m", messages=[user(f"m{i}")])
            assert reply.choices[0].message.content == f"You said: m{i}"
    assert flaky_mem.flush(timeout=0.3) is False
    errors = [r for r in caplog.records if r.name == "memtap.capture.writer" and r.levelname == "ERROR"]
    assert len(errors) == 1, "the outage is logged once, not per retry"
    flaky.down = False
    assert flaky_mem.flush(timeout=10)
    contents = [m.content for m in flaky.history("outage")]
    assert contents == [x for i in range(5) for x in (f"m{i}", f"You said: m{i}")]
    assert flaky.write_attempts > 1


def test_history_read_failure_sends_the_request_unchanged(flaky, flaky_mem, server):
    client = flaky_mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    flaky.down = True
    with flaky_mem.scope(session_id="noread"):
        client.chat.completions.create(model="m", messages=[user("still works")])
    assert server.last_json()["messages"] == [user("still works")]


class ExplodingInjector:
    @hookimpl
    def memtap_request_injections(self, request):
        raise RuntimeError("injector bug")


class ExplodingFormatter:
    @hookimpl(tryfirst=True)
    def memtap_format_exchange(self, raw):
        raise RuntimeError("formatter bug")


def test_a_raising_injection_hook_leaves_the_request_unchanged(server, store):
    mem = memtap.Memory(store, plugins=[memtap_openai, ExplodingInjector()], entry_points=False)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    with mem.scope(session_id="boom"):
        client.chat.completions.create(model="m", messages=[user("one")])
        reply = client.chat.completions.create(model="m", messages=[user("two")], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in reply) == "You said: two"
    assert server.last_json()["messages"] == [user("two")]
    mem.close()


def test_a_raising_formatter_never_reaches_the_caller(server, store, caplog):
    mem = memtap.Memory(store, plugins=[memtap_openai, ExplodingFormatter()], entry_points=False)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    with mem.scope(session_id="fmt"):
        assert client.chat.completions.create(model="m", messages=[user("x")]).choices
    assert mem.flush(timeout=5)
    assert mem.writer.stats.unformatted == 1
    assert any("could not format" in r.message for r in caplog.records)
    mem.close()


def scope_tags(message: dict) -> list[str]:
    """The thread tags (``t3``) of a message's turns: its content, or for a memory block
    the turns it recalled (the model's answers are episodes too)."""
    if message["role"] != "system":
        return [message["content"].removeprefix("You said: ").split("-")[0]]
    said = [line.split(" said: ", 1)[1] for line in message["content"].splitlines() if " said: " in line]
    assert said, message
    return [text.removeprefix("You said: ").split("-")[0] for text in said]


def test_threads_never_mix_scopes_and_lose_nothing(server, store):
    mem = memtap.Memory(store, plugins=[memtap_openai], entry_points=False)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    threads, calls = 8, 15

    def worker(t: int) -> None:
        with mem.scope(entity_id=f"e{t}", session_id=f"s{t}"):
            for i in range(calls):
                client.chat.completions.create(model="m", messages=[user(f"t{t}-{i}")])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    for request in server.requests:
        tags = {tag for m in request.json["messages"] for tag in scope_tags(m)}
        assert len(tags) == 1, f"a request mixed two scopes: {request.json['messages']}"
    assert mem.flush()
    assert store.stats()["exchanges"] == threads * calls
    for t in range(threads):
        assert len(mem.history(f"s{t}", entity_id=f"e{t}")) == 2 * calls
    mem.close()


def test_no_api_key_reaches_the_store_or_the_spans(client, mem, store, memtap_spans, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    leaked = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123"
    with mem.scope(session_id="secret"):
        client.chat.completions.create(
            model="m",
            messages=[user(f"my key is {leaked}, keep it")],
            extra_headers={"Authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY},
        )
    mem.flush()
    dumped = json.dumps([memtap.protocol.model.to_dict(e) for e in store.exchanges()])
    spans = json.dumps([dict(s.attributes or {}) for s in memtap_spans.get_finished_spans()])
    for text in (dumped, spans):
        assert API_KEY not in text
        assert leaked not in text
    assert "[REDACTED]" in dumped


def test_spans_follow_the_gen_ai_conventions(client, mem, server, memtap_spans):
    server.script(Reply(text="ok", input_tokens=12, output_tokens=4))
    with mem.scope(session_id="traced"):
        client.chat.completions.create(model="gpt-traced", messages=[user("hello")])
    mem.flush()
    spans = {s.name: s for s in memtap_spans.get_finished_spans()}
    call = spans["chat gpt-traced"]
    attrs = dict(call.attributes)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-traced"
    assert attrs["gen_ai.response.model"] == "gpt-traced"
    assert attrs["gen_ai.usage.input_tokens"] == 12 and attrs["gen_ai.usage.output_tokens"] == 4
    assert tuple(attrs["gen_ai.response.finish_reasons"]) == ("stop",)
    assert attrs["gen_ai.conversation.id"] == "traced"
    assert "gen_ai.input.messages" not in attrs, "content only when the env var allows it"
    for child in ("memtap.inject", "memtap.capture.writer"):
        assert spans[child].parent.span_id == call.context.span_id


def test_a_failed_call_ends_its_span_with_the_error(client, server, memtap_spans):
    server.script(Reply(status=500))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[user("x")])
    (span,) = [s for s in memtap_spans.get_finished_spans() if s.name.startswith("chat")]
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "InternalServerError"


def test_slow_history_read_is_paid_once_per_session(flaky, flaky_mem, server):
    client = flaky_mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    flaky.slow = slack(0.2)
    threads_before = threading.active_count()
    with flaky_mem.scope(session_id="slow"):
        started = time.perf_counter()
        for i in range(5):
            client.chat.completions.create(model="m", messages=[user(str(i))])
        elapsed = time.perf_counter() - started
    assert elapsed < flaky.slow * 2, "the store is read once for the session, then the cache serves"
    assert threading.active_count() - threads_before < 10, "no thread per call"
