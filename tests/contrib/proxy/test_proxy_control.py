"""mem: commands, token, size limit, upstream configuration, headers, fail-open."""

from __future__ import annotations

import json
import logging

import httpx
import openai
import pytest
from proxy_support import API_KEY, make_memory, needs_anthropic

from memtap import hookimpl
from memtap_proxy import Proxy, ProxyConfig, ProxyThread
from memtap_proxy.config import check_bind, is_loopback


@pytest.fixture
def oai(proxy: ProxyThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)


def ask(oai: openai.OpenAI, text: str, stream: bool = False) -> str:
    if stream:
        chunks = oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    return r.choices[0].message.content or ""


def test_mem_commands_are_answered_locally(oai, upstream, mem) -> None:
    mem.remember("Alice lives in Tokyo", entity_id="default")
    assert "mem:recall" in ask(oai, "mem:help")
    assert "Tokyo" in ask(oai, "mem:recall where does Alice live", stream=True)
    status = ask(oai, "  mem:status")
    assert "store memory://" in status
    assert "recall since start: 1 search(es)" in status  # the mem:recall above
    assert "mem:forget --yes" in ask(oai, "mem:forget")
    assert mem.facts(entity_id="default")
    assert "deleted" in ask(oai, "mem:forget --yes")
    assert not mem.facts(entity_id="default")
    assert "unknown memtap command" in ask(oai, "mem:bogus")
    assert upstream.requests == []
    mem.flush()
    assert mem.history("default") == []  # commands are not conversation


def test_mem_commands_in_responses_json_and_stream(oai, upstream) -> None:
    assert "mem:recall" in oai.responses.create(model="m", input="mem:help").output_text
    with oai.responses.stream(model="m", input=[{"role": "user", "content": "mem:help"}]) as stream:
        assert "mem:recall" in stream.get_final_response().output_text
    assert upstream.requests == []


@needs_anthropic
def test_mem_commands_in_anthropic_json_and_stream(proxy, upstream) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url, api_key=API_KEY, max_retries=0)
    msg = client.messages.create(
        model="c", max_tokens=5, messages=[{"role": "user", "content": "mem:status"}]
    )
    assert "memtap proxy" in msg.content[0].text
    with client.messages.stream(
        model="c",
        max_tokens=5,
        messages=[{"role": "user", "content": [{"type": "text", "text": "mem:help"}]}],
    ) as stream:
        assert "mem:recall" in "".join(stream.text_stream)
    assert upstream.requests == []


@pytest.fixture
def token_proxy(upstream, mem):
    config = ProxyConfig(openai_upstream=upstream.base_url, token="s3cret")
    with ProxyThread(Proxy(config, mem)) as thread:
        yield thread


def test_token_is_required_when_set_and_never_forwarded(token_proxy, upstream) -> None:
    base = token_proxy.url + "/v1/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(base, json=body).status_code == 401
    assert httpx.post(base, json=body, headers={"x-memtap-token": "wrong"}).status_code == 401
    r = httpx.post(base, json=body, headers={"x-memtap-token": "s3cret", "authorization": "Bearer up"})
    assert r.status_code == 200
    headers = upstream.requests[-1].headers
    assert "x-memtap-token" not in headers and headers["authorization"] == "Bearer up"


def test_bind_rules() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    check_bind(ProxyConfig())
    with pytest.raises(ValueError, match="--token"):
        check_bind(ProxyConfig(host="0.0.0.0"))
    check_bind(ProxyConfig(host="0.0.0.0", token="t"))


def test_cli_refuses_a_public_address_without_token() -> None:
    from click.testing import CliRunner

    from memtap.cli.main import main

    result = CliRunner().invoke(main, ["proxy", "--host", "0.0.0.0", "--store", "memory://"])
    assert result.exit_code != 0 and "--token" in result.output


def test_size_limit(upstream, mem) -> None:
    config = ProxyConfig(openai_upstream=upstream.base_url, max_body=1000)
    with ProxyThread(Proxy(config, mem)) as thread:
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}
        r = httpx.post(thread.url + "/v1/chat/completions", json=big)
        assert r.status_code == 413
        assert "--max-body" in r.json()["error"]["message"]

        def chunks():
            yield b'{"model":"m","messages":[{"role":"user","content":"'
            yield b"y" * 2000
            yield b'"}]}'

        r = httpx.post(thread.url + "/v1/chat/completions", content=chunks())  # no content-length
        assert r.status_code == 413
    assert upstream.requests == []


def test_unconfigured_family_names_the_flag(upstream, mem) -> None:
    with ProxyThread(Proxy(ProxyConfig(openai_upstream=upstream.base_url), mem)) as thread:
        r = httpx.post(thread.url + "/v1/messages", json={"model": "c", "messages": []})
        assert r.status_code == 502
        assert "--anthropic-upstream" in r.json()["error"]["message"]
        r = httpx.get(thread.url + "/v1/models", headers={"anthropic-version": "2023-06-01"})
        assert r.status_code == 502
    with ProxyThread(Proxy(ProxyConfig(), mem)) as thread:
        r = httpx.post(thread.url + "/v1/chat/completions", json={"model": "m", "messages": []})
        assert "--openai-upstream" in r.json()["error"]["message"]


def test_unreachable_upstream_is_a_502(mem) -> None:
    with ProxyThread(Proxy(ProxyConfig(openai_upstream="http://127.0.0.1:9"), mem)) as thread:
        r = httpx.post(thread.url + "/v1/chat/completions", json={"model": "m", "messages": []})
        assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]


def test_other_routes_pass_through_untouched(http, upstream) -> None:
    r = http.get("/v1/models?limit=3", headers={"authorization": "Bearer k"})
    assert r.status_code == 404 and "no route for GET /v1/models" in r.text
    assert upstream.requests[-1].query == "limit=3"
    raw = b'{"weird":  true}'
    r = http.post("/v1/embeddings", content=raw)
    assert upstream.requests[-1].body == raw


def test_hop_by_hop_headers_stop_at_the_proxy(http, upstream) -> None:
    http.post(
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "h"}]},
        headers={
            "connection": "keep-alive, x-private-hop",
            "x-private-hop": "1",
            "te": "trailers",
            "x-api-key": "sk-ant-abc",
            "anthropic-beta": "prompt-caching",
            "x-memtap-entity": "alice",
        },
    )
    headers = upstream.requests[-1].headers
    assert "x-private-hop" not in headers and "te" not in headers and "x-memtap-entity" not in headers
    assert headers["x-api-key"] == "sk-ant-abc" and headers["anthropic-beta"] == "prompt-caching"


class Broken:
    @hookimpl
    def memtap_request_injections(self, request):
        raise RuntimeError("injector bug")


def test_fail_open_on_a_broken_injector_and_a_broken_protocol(upstream, caplog) -> None:
    memory = make_memory(plugins=[Broken()])
    proxy = Proxy(ProxyConfig(openai_upstream=upstream.base_url), memory)
    raw = b'{"model": "m",  "messages": [{"role": "user", "content": "still works"}]}'
    with ProxyThread(proxy) as thread:
        r = httpx.post(
            thread.url + "/v1/chat/completions", content=raw, headers={"authorization": f"Bearer {API_KEY}"}
        )
        assert r.status_code == 200 and upstream.requests[-1].body == raw

        class Exploding:
            name, provider, operation = "openai.chat", "openai", "chat"

            def read_request(self, body):
                raise ValueError("protocol bug")

        proxy.protocols["openai.chat"] = Exploding()  # type: ignore[assignment]
        with caplog.at_level(logging.DEBUG):
            r = httpx.post(
                thread.url + "/v1/chat/completions",
                content=raw,
                headers={"authorization": f"Bearer {API_KEY}"},
            )
        assert r.status_code == 200 and upstream.requests[-1].body == raw
        assert proxy.stats.fail_open == 1
    assert API_KEY not in caplog.text
    memory.close()


def test_upstream_errors_pass_through_and_are_not_stored(oai, upstream, mem) -> None:
    from memtap.testing.server import Reply

    upstream.script(Reply(status=400, text="bad request from upstream"))
    with pytest.raises(openai.BadRequestError, match="bad request from upstream"):
        ask(oai, "x")
    mem.flush()
    assert mem.history("default") == []


def test_count_tokens_body_is_forwarded_byte_for_byte(http, upstream) -> None:
    raw = b'{"model":"c",  "messages":[{"role":"user","content":"a b"}]}'
    r = http.post("/v1/messages/count_tokens", content=raw, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200 and upstream.requests[-1].body == raw
    assert json.loads(r.content)["input_tokens"] >= 1
