"""``memtap mcp`` through the official MCP client SDK, on a DuckDB file: the server spawned
over stdio and served over streamable HTTP lists its four tools, and remember, recall,
forget and history work through them; the proxy's per-entity token rules apply over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import memtap
from memtap.sdk.server import Grant, TokenRule, token_digest
from memtap.testing.timing import slack, wait_for, wait_listening
from memtap_mcp.server import EntityRules, build_server

TOOLS = {"remember", "recall", "forget", "history"}
#: The `memtap` command line, run by this interpreter (the plugin adds `mcp` through its hook).
MEMTAP = [sys.executable, "-c", "import sys; from memtap.cli.main import main; sys.exit(main())"]
ALICE_TOKEN = "tok-alice-4b1d0c7e9a"
ADMIN_TOKEN = "tok-admin-99f0e1d2c3"
#: Seconds (before :func:`slack`) a test asks ``recall`` again while it answers ``loading``
#: (a busy CI machine's first load may take longer than the tool's wait; the store here
#: holds a few facts).
LOADING_PATIENCE = 20.0


# Own store: a DuckDB URL with two sessions (the MCP server under test opens it).
@pytest.fixture
def store(tmp_path: Path) -> str:
    """A DuckDB store holding one session of alice's and one of bob's."""
    url = f"duckdb:///{tmp_path / 'mcp.duckdb'}"
    mem = memtap.Memory(url, episodes=False)
    mem.capture("I moved to Lisbon", "Welcome to Lisbon!", entity_id="alice", session_id="s1")
    mem.capture("I play chess", "Nice.", entity_id="bob", session_id="s1")
    mem.close()
    return url


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """memtap's own files (durability spool...) of every process under the test's folder."""
    monkeypatch.setenv("MEMTAP_HOME", str(tmp_path / "memtap-home"))


def env() -> dict[str, str]:
    out = dict(os.environ)
    out.pop("MEMTAP_STORE", None)
    return out


def data(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


async def recall(client: Client, args: dict) -> dict:
    """``recall``'s answer once the entity's index is loaded: a ``loading`` answer (none
    found yet) is asked again, as the tool says to; each answer's shape is checked."""
    give_up = anyio.current_time() + slack(LOADING_PATIENCE)
    while True:
        found = data(await client.call_tool("recall", args))
        assert isinstance(found["loading"], bool)
        if not found["loading"]:
            return found
        assert found["facts"] == []
        assert anyio.current_time() < give_up, f"recall still loading after {slack(LOADING_PATIENCE):.0f} s"
        await anyio.sleep(0.2)


async def exercise(client: Client, *, entity: str | None) -> None:
    """Every tool, through ``client`` (``entity``: what the calls name; ``None`` relies on
    the server's default entity, alice)."""
    named = {"entity_id": entity} if entity else {}
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    assert all(t.description for t in listed.tools)

    stored = data(await client.call_tool("remember", {**named, "text": "Alice's cat is called Miso"}))
    assert stored["entity_id"] == "alice"
    miso = stored["fact"]["fact_id"]
    data(await client.call_tool("remember", {**named, "text": "Alice drinks oolong tea"}))

    found = await recall(client, {**named, "query": "what is the cat's name?", "k": 1})
    assert [f["fact_id"] for f in found["facts"]] == [miso]
    assert 0 < found["facts"][0]["score"] <= 1
    everything = await recall(client, {**named, "query": "zebra crossing", "k": 10})
    assert len(everything["facts"]) <= 10  # no score threshold: weak matches still listed

    turns = data(await client.call_tool("history", {**named, "session_id": "s1"}))["messages"]
    assert [(m["role"], m["content"]) for m in turns] == [
        ("user", "I moved to Lisbon"),
        ("assistant", "Welcome to Lisbon!"),
    ]

    gone = data(await client.call_tool("forget", {**named, "fact_id": miso}))
    assert gone["forgotten"] == 1
    after = await recall(client, {**named, "query": "what is the cat's name?", "k": 5})
    assert miso not in [f["fact_id"] for f in after["facts"]]
    assert data(await client.call_tool("forget", {**named, "fact_id": "no-such-fact"}))["forgotten"] == 0


def test_stdio_server_spawned_by_the_client(store: str) -> None:
    params = StdioServerParameters(
        command=MEMTAP[0], args=[*MEMTAP[1:], "mcp", "--store", store, "--entity", "alice"], env=env()
    )

    async def main() -> None:
        async with Client(params) as client:
            await exercise(client, entity=None)
            # Named explicitly, another entity: stdio may act as any (a local process).
            bob = data(await client.call_tool("history", {"entity_id": "bob", "session_id": "s1"}))
            assert [m["content"] for m in bob["messages"]] == ["I play chess", "Nice."]
            wiped = data(await client.call_tool("forget", {"entity_id": "bob"}))
            assert wiped["forgotten"] >= 1

    anyio.run(main)
    mem = memtap.Memory(store)  # the server exited: its writes are in the file
    try:
        assert [f.text for f in mem.facts(entity_id="alice")] == ["Alice drinks oolong tea"]
        assert mem.history("s1", entity_id="bob") == []
    finally:
        mem.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(store: str, tmp_path: Path) -> Iterator[str]:
    """``memtap mcp --http`` with a tokens file: alice's token may act as alice only, the
    admin token as anyone."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE_TOKEN} alice\n{ADMIN_TOKEN} *\n")
    tokens.chmod(0o600)
    port = free_port()
    proc = subprocess.Popen(
        [*MEMTAP, "mcp", "--store", store, "--http", "--port", str(port), "--tokens", str(tokens)],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def with_token(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(url, http_client=http))


def test_streamable_http_server_with_entity_tokens(http_server: str) -> None:
    async def main() -> None:
        async with with_token(http_server, ALICE_TOKEN) as client:
            # The token's line names alice: her calls need not name her.
            await exercise(client, entity=None)
            refused = await client.call_tool("recall", {"entity_id": "bob", "query": "chess"})
            assert refused.is_error
            assert "may not act as entity 'bob'" in refused.content[0].text
            assert ALICE_TOKEN not in refused.content[0].text
            refused = await client.call_tool("forget", {"entity_id": "bob"})
            assert refused.is_error
        async with with_token(http_server, ADMIN_TOKEN) as client:
            bob = data(await client.call_tool("history", {"entity_id": "bob", "session_id": "s1"}))
            assert [m["content"] for m in bob["messages"]] == ["I play chess", "Nice."]
            nobody = await client.call_tool("recall", {"query": "chess"})
            assert nobody.is_error and "name the entity_id" in nobody.content[0].text

    anyio.run(main)


@pytest.mark.parametrize("token", [None, "tok-wrong-000000"])
def test_http_without_a_valid_token_is_refused(http_server: str, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    answer = httpx2.post(
        http_server, json=body, headers={**headers, "Accept": "application/json, text/event-stream"}
    )
    assert answer.status_code == 401
    assert "missing or wrong token" in answer.text
    with pytest.raises(Exception):  # noqa: B017 - the client SDK's own error for a 401

        async def main() -> None:
            async with with_token(http_server, token) as client:
                await client.list_tools()

        anyio.run(main)


def test_http_beyond_loopback_needs_a_token(store: str) -> None:
    result = subprocess.run(
        [*MEMTAP, "mcp", "--store", store, "--http", "--host", "0.0.0.0"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "refusing to listen on 0.0.0.0" in result.stderr
    result = subprocess.run(
        [*MEMTAP, "mcp", "--store", store, "--token", "t"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--token and --tokens are for --http" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_http_server_stops_cleanly_on_a_signal(store: str, tmp_path: Path, sig: signal.Signals) -> None:
    """``memtap mcp --http`` stopped by SIGTERM (systemd, docker) or Ctrl-C exits 0 with its
    Memory closed (issue 35, item 6: it died by SIGTERM, rc -15): the store file is free
    for the next process, its data intact."""
    port = free_port()
    proc = subprocess.Popen(
        [*MEMTAP, "mcp", "--store", store, "--http", "--port", str(port)],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, proc)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    mem = memtap.Memory(store, spool=False, embedder=False)  # the file is free again
    try:
        assert mem.history("s1", entity_id="alice")[0].content == "I moved to Lisbon"
    finally:
        mem.close()


def wait_index_loads(mem: memtap.Memory, count: int) -> None:
    wait_for(lambda: mem.recall_stats().index_loads >= count, LOADING_PATIENCE, what=f"{count} index loads")


def test_the_server_loads_default_entities_at_start_and_an_entity_on_remember(tmp_path: Path) -> None:
    """So that the first ``recall`` finds the index (an agent that is told ``loading`` may
    not ask again): the server's ``--entity`` and each token line's default entity as it
    starts, and an entity named by ``remember`` (who remembers recalls next)."""
    mem = memtap.Memory(f"duckdb:///{tmp_path / 'warm.duckdb'}", spool=False, embedder=False, episodes=False)
    rules = EntityRules("alice", rules=[TokenRule(token_digest(ALICE_TOKEN), Grant("b*", "bob"))])
    try:
        assert rules.default_entities() == ["alice", "bob"]
        server = build_server(mem, rules)
        wait_index_loads(mem, 2)

        async def main() -> None:
            async with Client(server) as client:
                data(await client.call_tool("remember", {"entity_id": "carol", "text": "Carol sails"}))

        anyio.run(main)
        wait_index_loads(mem, 3)
        found = mem.longterm.recall_soon("sails", entity_id="carol", k=1, index_wait=0.0, deadline=0.0)
        assert found is not None and [f.fact.text for f in found] == ["Carol sails"]
    finally:
        mem.close()
