"""`memtap proxy --ui`: the memory browser under /_memtap/ of a running proxy, which holds
the store, while the proxy goes on forwarding calls (the real openai SDK through it)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import httpx
import openai
import pytest
from click.testing import CliRunner

import memtap
from memtap.cli.main import main
from memtap.sdk.server import parse_tokens
from memtap.testing.server import Reply, ScriptedModelServer
from memtap_proxy import Proxy, ProxyConfig, ProxyThread


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def start(mem: memtap.Memory, upstream: ScriptedModelServer, **config: object) -> ProxyThread:
    settings = ProxyConfig(openai_upstream=upstream.base_url, ui=True, **config)  # type: ignore[arg-type]
    return ProxyThread(Proxy(settings, mem)).start()


@pytest.fixture
def proxy(mem: memtap.Memory, upstream: ScriptedModelServer) -> Iterator[ProxyThread]:
    thread = start(mem, upstream)
    yield thread
    thread.stop()


def links(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'(?:href|action)="([^"]*)"', html)]


def test_the_ui_is_served_under_memtap_and_every_link_stays_there(proxy):
    with httpx.Client(base_url=proxy.url) as http:
        home = http.get("/_memtap/")
        assert home.status_code == 200 and 'href="/_memtap/entities/alice"' in home.text
        seen = set(links(home.text))
        for path in ("/_memtap/entities/alice", "/_memtap/sessions/monday?entity=alice"):
            page = http.get(path)
            assert page.status_code == 200, path
            seen.update(links(page.text))
        assert seen and all(link.startswith("/_memtap/") for link in seen), seen
        exchange = next(link for link in seen if "/exchanges/" in link)
        assert "What memtap injected" in http.get(exchange).text
        assert http.get("/_memtap/static/style.css").status_code == 200
        bare = http.get("/_memtap")
        assert bare.status_code in (307, 308) and bare.headers["location"].endswith("/_memtap/")


def test_the_proxy_forwards_and_captures_calls_while_it_serves_the_ui(proxy, upstream, mem):
    upstream.script(Reply(text="Hello Carol."))
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-test-000000000000")
    answer = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "I am Carol"}],
        extra_headers={"x-memtap-entity": "carol", "x-memtap-session": "c1"},
    )
    assert answer.choices[0].message.content == "Hello Carol."
    mem.flush()
    with httpx.Client(base_url=proxy.url) as http:
        assert 'href="/_memtap/entities/carol"' in http.get("/_memtap/").text
        session = http.get("/_memtap/sessions/c1?entity=carol").text
        assert "I am Carol" in session and "Hello Carol." in session


def test_forget_through_the_proxy_needs_the_same_origin_and_csrf(proxy, mem):
    fact = next(f for f in mem.facts(entity_id="alice") if f.text == "Alice lives in Kyoto")
    with httpx.Client(base_url=proxy.url) as http:
        page = http.get("/_memtap/entities/alice").text
        csrf = re.search(r'name="csrf" value="(\w+)"', page).group(1)
        form = {"csrf": csrf, "fact_id": fact.id}
        other = http.post(
            "/_memtap/entities/alice/forget", data=form, headers={"origin": "http://evil.example"}
        )
        assert other.status_code == 403
        assert http.post("/_memtap/entities/alice/forget", data={"fact_id": fact.id}).status_code == 403
        assert any(f.id == fact.id for f in mem.facts(entity_id="alice"))
        done = http.post("/_memtap/entities/alice/forget", data=form, headers={"origin": proxy.url})
        assert done.status_code == 303 and done.headers["location"].startswith("/_memtap/entities/alice?")
    assert all(f.id != fact.id for f in mem.facts(entity_id="alice"))


def test_with_a_token_the_ui_asks_for_it_and_its_cookie_is_scoped_to_the_ui(mem, upstream):
    thread = start(mem, upstream, token="tok-123")
    try:
        with httpx.Client(base_url=thread.url) as http:
            assert http.get("/_memtap/").status_code == 401
            login = http.get("/_memtap/entities/alice?token=tok-123")
            assert login.status_code == 303 and login.headers["location"] == "/_memtap/entities/alice"
            assert "Path=/_memtap;" in login.headers["set-cookie"]
            assert http.get("/_memtap/entities/alice").status_code == 200
            # The model API still wants the token in its header.
            assert http.post("/v1/chat/completions", json={}).status_code == 401
    finally:
        thread.stop()


def test_without_ui_nothing_is_served_under_memtap(mem, upstream):
    thread = ProxyThread(Proxy(ProxyConfig(openai_upstream=upstream.base_url), mem)).start()
    try:
        with httpx.Client(base_url=thread.url) as http:
            assert "alice" not in http.get("/_memtap/").text
    finally:
        thread.stop()


def test_ui_with_entity_bound_tokens_needs_a_token_for_every_entity(mem, upstream):
    rules = parse_tokens("tok-a alice\n")
    with pytest.raises(ValueError, match="--ui shows every entity"):
        Proxy(ProxyConfig(openai_upstream=upstream.base_url, ui=True, tokens=rules), mem)
    start(mem, upstream, tokens=rules, token="all-of-them").stop()


def test_memtap_proxy_has_the_ui_flag():
    result = CliRunner().invoke(main, ["proxy", "--help"])
    assert result.exit_code == 0 and "--ui" in result.output and "/_memtap/" in result.output
