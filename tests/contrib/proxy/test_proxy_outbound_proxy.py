"""The upstream client through an outbound HTTP proxy named by the environment: a CONNECT
tunnel (TLS to the upstream inside it) for https:// upstreams, absolute-form requests for
http:// ones, Basic credentials from the proxy URL, NO_PROXY and loopback going direct."""

from __future__ import annotations

import asyncio
import base64

import pytest
from proxy_forward import ForwardProxy
from proxy_raw_upstream import RawUpstream, tls_contexts

from memtap_proxy.upstream import (
    DIRECT,
    Origin,
    UpstreamConnectError,
    UpstreamPool,
    egress_from_environment,
)

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
JSON = [(b"content-type", b"application/json")]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def fetch_all(urls: list[str], **pool_options: object) -> list[tuple[int, bytes]]:
    async def main() -> list[tuple[int, bytes]]:
        pool = UpstreamPool(**pool_options)  # type: ignore[arg-type]
        out = []
        try:
            for url in urls:
                response = await pool.request("POST", url, JSON, b"{}")
                try:
                    out.append((response.status, await response.read()))
                finally:
                    response.close()
        finally:
            await pool.aclose()
        return out

    return asyncio.run(main())


def test_https_upstream_goes_through_a_connect_tunnel(monkeypatch: pytest.MonkeyPatch) -> None:
    server_context, client_context = tls_contexts("api.example.test")
    with RawUpstream(tls=server_context) as upstream, ForwardProxy(upstream.port) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://ann:p%40ss@127.0.0.1:{proxy.port}")
        urls = ["https://api.example.test/v1/chat/completions", "https://api.example.test/v1/x"]
        assert fetch_all(urls, ssl_context=client_context) == [(200, b'{"ok": true}')] * 2
    # One tunnel, kept alive for the second request; the credentials went to the proxy only.
    ((line, headers),) = proxy.connects
    assert line == "CONNECT api.example.test:443"
    assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"ann:p@ss").decode()
    assert [(r.target, r.headers["host"]) for r in upstream.requests] == [
        ("/v1/chat/completions", "api.example.test"),
        ("/v1/x", "api.example.test"),
    ]
    assert all("proxy-authorization" not in r.headers for r in upstream.requests)
    assert upstream.connections == 1


def test_http_upstream_gets_absolute_form_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    with RawUpstream() as proxy:  # answers like a proxy that forwarded the request
        monkeypatch.setenv("http_proxy", f"http://bob:secret@127.0.0.1:{proxy.port}")
        assert fetch_all(["http://models.example.test:8080/v1/y?z=1"]) == [(200, b'{"ok": true}')]
    (seen,) = proxy.requests
    assert seen.target == "http://models.example.test:8080/v1/y?z=1"
    assert seen.headers["host"] == "models.example.test:8080"
    assert seen.headers["proxy-authorization"] == "Basic " + base64.b64encode(b"bob:secret").decode()


def test_a_refused_connect_is_a_connect_error_naming_the_status(monkeypatch: pytest.MonkeyPatch) -> None:
    with ForwardProxy(target_port=9, refuse=407) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{proxy.port}")  # scheme-less: http://
        refused = r"refused to connect to api\.example\.test:443 \(HTTP 407\)"
        with pytest.raises(UpstreamConnectError, match=refused):
            fetch_all(["https://api.example.test/v1/x"])
    assert [line for line, _ in proxy.connects] == ["CONNECT api.example.test:443"]


def test_no_proxy_loopback_and_trust_env_go_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.corp:3128")
    via = egress_from_environment(Origin.parse("https://api.openai.com"))
    assert via.proxy == Origin.parse("http://proxy.corp:3128") and via.tunnel and via.auth is None
    plain = egress_from_environment(Origin.parse("http://api.openai.com"))
    assert plain.proxy is not None and not plain.tunnel
    for local in ("http://127.0.0.1:8080", "https://localhost", "http://[::1]:9000"):
        assert egress_from_environment(Origin.parse(local)) is DIRECT
    monkeypatch.setenv("NO_PROXY", ".openai.com,internal.corp")
    assert egress_from_environment(Origin.parse("https://api.openai.com")) is DIRECT
    assert egress_from_environment(Origin.parse("https://api.anthropic.com")).proxy is not None
    assert UpstreamPool(trust_env=False)._route(Origin.parse("https://api.anthropic.com")) is DIRECT


def test_an_unusable_proxy_is_a_clear_error_not_a_direct_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://user:hunter2@proxy.corp:1080")
    with pytest.raises(UpstreamConnectError, match="only http:// outbound proxies") as info:
        fetch_all(["https://api.example.test/v1/x"])
    assert "hunter2" not in str(info.value)


def test_the_proxy_answers_502_saying_why_the_outbound_proxy_is_unusable(
    monkeypatch: pytest.MonkeyPatch, mem
) -> None:
    import httpx

    from memtap_proxy import Proxy, ProxyConfig, ProxyThread

    monkeypatch.setenv("HTTPS_PROXY", "socks5://proxy.corp:1080")
    config = ProxyConfig(openai_upstream="https://api.example.test")
    with ProxyThread(Proxy(config, mem)) as proxy, httpx.Client(trust_env=False) as client:
        r = client.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": []})
    assert r.status_code == 502
    assert "only http:// outbound proxies" in r.json()["error"]["message"]


def test_proxy_urls_with_ipv6_hosts_ports_in_no_proxy_and_unreadable_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = Origin.parse("https://api.example.test")
    monkeypatch.setenv("HTTPS_PROXY", "http://u:p@[fd00::1]:3128")
    route = egress_from_environment(target)
    assert route.proxy == Origin.parse("http://[fd00::1]:3128") and route.auth == b"Basic dTpw"
    monkeypatch.setenv("NO_PROXY", "api.example.test:443")
    assert egress_from_environment(target) is DIRECT
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s3cr/et@proxy.corp:3128")  # "/" not %-encoded
    with pytest.raises(ValueError, match="%-encoded") as info:
        egress_from_environment(target)
    assert "s3cr" not in str(info.value) and "alice" not in str(info.value)
