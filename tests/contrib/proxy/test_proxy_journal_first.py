"""Journaled before answered, through the proxy (issue 35, item 2): the call's record is in
the spool file before the client can have the whole answer, for every wire protocol,
streamed or not. The proxy's ASGI application is driven directly, so the test sees each
message it hands the server: at the one that completes the answer (a JSON body; the chunk
holding a stream's terminal event, or the end of the body), the spool on disk must already
hold the call, its answer included."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from proxy_support import make_memory

from memtap.testing.server import Reply, ScriptedModelServer
from memtap_duckdb import DuckDBStore
from memtap_proxy import Proxy, ProxyConfig

#: (path, body) of one request per protocol and mode; the answer text is ``ANSWER``.
ANSWER = "journaled-before-answered"
REQUESTS = {
    "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
    "anthropic": (
        "/v1/messages",
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
    ),
}
TERMINATORS = (b"[DONE]", b"message_stop", b"response.completed")


def spooled(spool: Path) -> str:
    """Everything in the spool's segment files, as on disk now."""
    return "".join(p.read_text() for p in sorted(spool.rglob("*.jsonl")))


#: Each body message the proxy sent: its bytes, whether it ended the response, the spool then.
Sent = list[tuple[bytes, bool, str]]


async def serve_one(proxy: Proxy, path: str, body: dict[str, Any], spool: Path) -> Sent:
    """Send one request through ``proxy``; each body message it sends, with whether it ends
    the response and what the spool held when it was sent."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "server": ("127.0.0.1", 8096),
    }
    delivered = False
    forever = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await forever.wait()
        return {"type": "http.disconnect"}

    sent: Sent = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            more = message.get("more_body", False)
            sent.append((message.get("body", b""), not more, spooled(spool)))

    try:
        await proxy(scope, receive, send)
    finally:
        await proxy.aclose()
    return sent


def completing(sent: Sent) -> tuple[bytes, bool, str]:
    """The first message after which the client has the whole answer."""
    for message in sent:
        body, last, _ = message
        if last or any(t in body for t in TERMINATORS):
            return message
    raise AssertionError("the answer never completed")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("protocol", sorted(REQUESTS))
@pytest.mark.parametrize("chunks", [1, 4])
def test_the_call_is_in_the_spool_before_the_answer_is_complete(
    tmp_path: Path, upstream: ScriptedModelServer, protocol: str, stream: bool, chunks: int
) -> None:
    path, body = REQUESTS[protocol]
    if protocol == "anthropic":
        pytest.importorskip("memtap_anthropic")
    spool = tmp_path / "spool"
    mem = make_memory(DuckDBStore(tmp_path / "m.duckdb"), spool=spool)
    try:
        upstream.script(Reply(text=ANSWER, chunks=chunks))
        config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
        proxy = Proxy(config, mem)
        sent = asyncio.run(serve_one(proxy, path, dict(body, stream=stream), spool))
        body_bytes, _, on_disk = completing(sent)
        size = -(-len(ANSWER) // chunks)  # the pieces the scripted server streams
        pieces = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)] if stream else [ANSWER]
        received = b"".join(m[0] for m in sent)
        assert all(p.encode() in received for p in pieces)  # the answer went through
        # The record, with every piece of the answer, was on disk when the message that
        # completes the answer went out.
        missing = [p for p in pieces if p not in on_disk]
        assert not missing, f"not journaled before the answer's last bytes ({body_bytes[-80:]!r})"
        assert len([line for line in on_disk.splitlines() if line.strip()]) == 1
        assert mem.flush()
        assert [e.id for e in mem.store.exchanges()]  # and stored, as before
    finally:
        mem.close()
