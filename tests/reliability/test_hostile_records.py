"""Hostile records never stop storage (issue 35, item 1): a corpus of records a store or the
spool would refuse (lone surrogates, which JSON allows, in content, tool arguments, answers
and ids; NUL; a large value; a number no column holds) x both stores (a DuckDB file, the
local PostgreSQL) x the three ways in (a real openai client registered in-process, the
proxy as its tests start it, ``memtap import-transcript``).

What must hold: each good call is stored by the flush that follows it (0 delayed beyond one
batch, 0 lost); text a store can hold once made storable is stored with U+FFFD (not
quarantined); what no store can hold is in quarantine, redacted; the spool journaled every
call. Before the change, the first surrogate made every write of the batch fail and the
writer retried it forever: nothing after it was stored.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from reliability_support import API_KEY, BACKENDS

import memtap
from memtap.testing.server import Reply, ScriptedModelServer

SECRET = "ghp_" + "R3liab1lityHostile0123456789abcdefGHIJ"


@dataclasses.dataclass(frozen=True)
class Case:
    """One hostile call: the messages sent, the model's reply, what is expected of it
    (``stored``, with U+FFFD where the hostile character was, or ``quarantined``), its
    session (``None``: named after the case), and the ways in that can send it (the openai
    SDK itself cannot encode a lone surrogate in a request: in-process, it raises before
    sending, with or without memtap; an HTTP header cannot carry one either)."""

    messages: list[dict[str, Any]]
    reply: Reply
    expected: str = "stored"
    session: str | None = None
    ways: tuple[str, ...] = ("in-process", "proxy")


def raw_answer(message: dict[str, Any]) -> Reply:
    """A chat completion answering ``message``, written as ASCII JSON (a lone surrogate
    escaped as ``\\ud800``: legal JSON, as a hostile or buggy upstream sends it; the scripted
    server's own encoder writes UTF-8, which cannot hold one)."""
    body = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return Reply(raw_body=json.dumps(body).encode())


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


TOOL_ROUND = [
    {"role": "user", "content": "look it up"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "find", "arguments": '{"q": "\ud800"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "found \udbff it"},
]

CORPUS: dict[str, Case] = {
    "lone surrogate in content": Case(user("bad \ud800 text"), Reply(text="ok"), ways=("proxy",)),
    "lone low surrogate in content": Case(user("end \udfff"), Reply(text="ok"), ways=("proxy",)),
    "lone surrogate in tool arguments": Case(TOOL_ROUND, Reply(text="ok"), ways=("proxy",)),
    "lone surrogate in the answer": Case(user("say it"), raw_answer({"content": "answer \ud800"})),
    "lone surrogate in a tool call's answer": Case(
        user("call it"),
        raw_answer(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "find", "arguments": '{"q": "\udc00"}'},
                    }
                ],
            }
        ),
    ),
    "lone surrogate in the session id": Case(
        user("which session?"), Reply(text="this one"), session="bad \ud800 session", ways=("in-process",)
    ),
    "NUL in content": Case(user("nul \x00 text"), Reply(text="ok")),
    "a large value": Case(user("big " + "x" * 2_000_000), Reply(text="ok")),
    "a token count no column holds": Case(
        user(f"count me, key {SECRET}"), Reply(text="ok", input_tokens=10**20), expected="quarantined"
    ),
}


def _no_surrogates(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _stored_texts(mem: memtap.Memory, session: str) -> list[str]:
    out = []
    for ex in mem.store.exchanges(entity_id="team", session_id=session):
        for m in ex.messages:
            out.append(m.content)
            out.extend(c.arguments for c in m.tool_calls)
    return out


class InProcess:
    """A real openai client registered on the Memory, against the scripted server."""

    def __init__(self, mem: memtap.Memory, server: ScriptedModelServer) -> None:
        self.mem = mem
        self.client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
        )

    def call(self, session: str, messages: list[dict[str, Any]]) -> None:
        with self.mem.scope(entity_id="team", session_id=session):
            self.client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]

    def close(self) -> None:
        pass


class ThroughProxy:
    """The proxy as its tests start it (in a thread, on the same Memory), called with httpx."""

    def __init__(self, mem: memtap.Memory, server: ScriptedModelServer) -> None:
        from memtap_proxy.app import Proxy
        from memtap_proxy.config import ProxyConfig
        from memtap_proxy.server import ProxyThread

        self.mem = mem
        self.thread = ProxyThread(Proxy(ProxyConfig(openai_upstream=server.base_url), mem)).start()
        self.http = httpx.Client(base_url=self.thread.url, timeout=30)

    def call(self, session: str, messages: list[dict[str, Any]]) -> None:
        # json.dumps escapes a lone surrogate (\ud800): legal JSON, as a hostile client sends it.
        body = json.dumps({"model": "m", "messages": messages}).encode()
        response = self.http.post(
            "/v1/chat/completions",
            content=body,
            headers={
                "content-type": "application/json",
                "authorization": f"Bearer {API_KEY}",
                "x-memtap-entity": "team",
                "x-memtap-session": session,
            },
        )
        assert response.status_code == 200, response.text

    def close(self) -> None:
        self.http.close()
        self.thread.stop()


PATHS: dict[str, Callable[[memtap.Memory, ScriptedModelServer], Any]] = {
    "in-process": InProcess,
    "proxy": ThroughProxy,
}


@pytest.fixture(params=list(PATHS))
def way_in(request: pytest.FixtureRequest) -> str:
    if request.param == "proxy":
        pytest.importorskip("memtap_proxy", reason="memtap-proxy is not installed")
    return str(request.param)


@pytest.fixture
def memory(store_url: str, tmp_path: Path) -> Iterator[memtap.Memory]:
    mem = memtap.Memory(store_url, spool=tmp_path / "spool")
    yield mem
    mem.close()


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_hostile_records_never_delay_good_ones(
    store_url: str, way_in: str, memory: memtap.Memory, server: ScriptedModelServer
) -> None:
    path = PATHS[way_in](memory, server)
    cases = {name: case for name, case in CORPUS.items() if way_in in case.ways}
    try:
        good = 0
        for name, case in cases.items():
            server.script(case.reply)
            path.call(case.session or f"bad {name}", case.messages)
            # Two good calls behind each hostile one, of other sessions: each is stored by
            # the flush that follows it (before: the first hostile record stopped them all).
            for _ in range(2):
                good += 1
                server.script(Reply(text=f"good answer {good}"))
                path.call(f"good {good}", user(f"good question {good}"))
                assert memory.flush(10), f"good call {good} (after {name!r}) was not stored"
                assert f"good question {good}" in _stored_texts(memory, f"good {good}")
    finally:
        path.close()
    assert memory.spool is not None and memory.spool.stats.failed == 0  # every call journaled
    for name, case in cases.items():
        session = (case.session or f"bad {name}").replace("\ud800", "\ufffd")  # as stored
        texts = _stored_texts(memory, session)
        if case.expected == "stored":
            assert texts, f"{name}: not stored"
            assert all(_no_surrogates(t) for t in texts), name
            if name == "NUL in content" and store_url.startswith("duckdb"):
                assert "nul \x00 text" in texts  # DuckDB holds NUL: kept as it was
            elif name == "lone surrogate in the session id":
                assert texts == ["which session?", "this one"]
            elif name != "a large value":
                assert any("\ufffd" in t for t in texts), f"{name}: {texts!r}"
        else:
            assert texts == [], f"{name}: stored although no column holds it"
    kept = list(memory.quarantine.records())
    assert [r.exchange.attribution.session_id for r in kept] == ["bad a token count no column holds"]
    assert memory.quarantine.directory is not None
    on_disk = "".join(p.read_text() for p in memory.quarantine.directory.iterdir())
    assert SECRET not in on_disk and "count me" in on_disk  # redacted, and inspectable
    assert memory.store.stats()["exchanges"] == good + len(cases) - 1


@pytest.mark.parametrize("text", ["bad \ud800 text", "end \udfff"])
def test_the_openai_sdk_refuses_a_lone_surrogate_in_a_request_as_without_memtap(
    tmp_path: Path, server: ScriptedModelServer, text: str
) -> None:
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    with memtap.Memory(f"duckdb:///{tmp_path / 'm.duckdb'}") as mem:
        tapped = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
        for client in (bare, tapped):
            with pytest.raises(UnicodeEncodeError):
                client.chat.completions.create(model="m", messages=user(text))  # type: ignore[arg-type]
        server.script(Reply(text="fine"))
        tapped.chat.completions.create(model="m", messages=user("next"))  # type: ignore[arg-type]
        assert mem.flush(10)
        assert mem.store.stats()["exchanges"] == 1


def _write_transcript(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_import_transcript_of_hostile_lines_exits_and_stores_them(store_url: str, tmp_path: Path) -> None:
    # Before: a file with a lone-surrogate line never exited (every thread in futex_wait).
    lines = []
    for i, (content, session) in enumerate(
        [
            ("bad \\ud800 text", None),
            ("nul \\u0000 text", None),
            ("tail \\udfff", "session \\ud800 id"),
            ("fine", None),
        ]
    ):
        extra = f', "session_id": "{session}"' if session else ""
        lines.append(f'{{"role": "user", "content": "{content}", "at": {1_700_000_000 + 2 * i}{extra}}}')
        lines.append(
            f'{{"role": "assistant", "content": "answer {i}", "at": {1_700_000_001 + 2 * i}{extra}}}'
        )
    transcript = tmp_path / "hostile.jsonl"
    _write_transcript(transcript, lines)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
    env["MEMTAP_HOME"] = str(tmp_path / "home")
    started = time.monotonic()
    command = ["import-transcript", str(transcript), "--entity", "team", "--store", store_url]
    done = subprocess.run(
        [sys.executable, "-m", "memtap.cli", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 120
    assert "imported 4 new turn(s)" in done.stderr
    with memtap.Memory(store_url) as mem:
        texts = [m.content for ex in mem.store.exchanges(entity_id="team") for m in ex.messages]
        sessions = {ex.attribution.session_id for ex in mem.store.exchanges(entity_id="team")}
        assert mem.quarantine.count() == 0
    assert "bad \ufffd text" in texts and "tail \ufffd" in texts and "fine" in texts
    assert "session \ufffd id" in sessions
    assert all(_no_surrogates(t) for t in texts)


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from memtap.cli.main import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def quarantined_row(table: str) -> list[str]:
    """The count ``memtap stats`` shows in its ``quarantined`` row."""
    return [line.split("│")[2].strip() for line in table.splitlines() if "quarantined" in line]


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_memtap_quarantine_lists_retries_and_drops_and_stats_counts_it(
    store_url: str, server: ScriptedModelServer
) -> None:
    with memtap.Memory(store_url) as mem:
        client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0))
        server.script(Reply(text="ok", input_tokens=10**20))
        with mem.scope(entity_id="team", session_id="refused"):
            client.chat.completions.create(model="m", messages=user(f"count me, key {SECRET}"))  # type: ignore[arg-type]
        assert mem.flush(10)
        (refused,) = [r.exchange.id for r in mem.quarantine.records()]
        # One an earlier version kept: storable once its surrogate is replaced.
        hostile = memtap.Exchange(
            attribution=memtap.Attribution(entity_id="team", session_id="older"),
            provider="app",
            operation="chat",
            input=[memtap.Message(role="user", content="old \ud800 record")],
        )
        assert mem.quarantine.put(hostile, "UnicodeEncodeError: surrogates not allowed")

    stats = _cli("stats", "--store", store_url)
    assert stats.exit_code == 0 and "quarantined" in stats.output
    assert [line.split("│")[2].strip() for line in stats.output.splitlines() if "quarantined" in line] == [
        "2"
    ]
    listed = _cli("quarantine", "list", "--store", store_url)
    assert refused[:8] in listed.output and "count" in listed.output  # (a narrow table folds them)
    printed = _cli("quarantine", "list", "--json", "--store", store_url).output
    assert SECRET not in printed and "count me" in printed
    as_json = json.loads(printed)
    assert {r["exchange"]["id"] for r in as_json} == {refused, hostile.id}
    assert "out of range" in json.dumps(as_json)  # why the store refused it

    retried = _cli("quarantine", "retry", "--all", "--store", store_url)
    assert "stored 1 quarantined call(s); 1 still refused" in retried.output, retried.output
    with memtap.Memory(store_url) as mem:
        assert [m.content for m in mem.history("older", entity_id="team")] == ["old \ufffd record"]
        assert [r.exchange.id for r in mem.quarantine.records()] == [refused]

    assert _cli("quarantine", "drop", "--store", store_url).exit_code == 2  # ids or --all
    unconfirmed = _cli("quarantine", "drop", "--all", "--store", store_url)
    assert unconfirmed.exit_code == 1 and "--yes" in unconfirmed.output
    dropped = _cli("quarantine", "drop", refused, "--yes", "--store", store_url)
    assert "dropped 1 quarantined call(s)" in dropped.output
    assert "no quarantined calls" in _cli("quarantine", "list", "--store", store_url).output
    stats = _cli("stats", "--store", store_url)
    assert [line.split("│")[2].strip() for line in stats.output.splitlines() if "quarantined" in line] == [
        "0"
    ]


@pytest.mark.parametrize("store_url", BACKENDS, indirect=True)
def test_import_transcript_of_a_lone_surrogate_line_exits_in_bounded_time(
    store_url: str, tmp_path: Path
) -> None:
    # The file: before, the import never exited (720 s, every thread in futex_wait).
    transcript = tmp_path / "one-bad-line.jsonl"
    _write_transcript(
        transcript,
        [
            '{"role": "user", "content": "bad \\ud800 text", "at": 1700000000}',
            '{"role": "assistant", "content": "ok", "at": 1700000001}',
        ],
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
    env["MEMTAP_HOME"] = str(tmp_path / "home")
    command = ["import-transcript", str(transcript), "--entity", "team", "--store", store_url]
    done = subprocess.run(
        [sys.executable, "-m", "memtap.cli", *command], env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    assert "imported 1 new turn(s)" in done.stderr
