"""What the memtap proxy adds to a call: direct to a local upstream vs through the proxy.

Three processes on loopback: a minimal asyncio upstream (fixed answers in each protocol's
shape — Chat Completions, Anthropic Messages, Responses, Gemini — JSON and SSE, keep-alive,
TCP_NODELAY), ``memtap proxy`` (one uvicorn worker, in-memory store, history injection on),
and this client (httpx). Measured for JSON and SSE chat calls, for a passed-through route
(``/v1/embeddings``: the HTTP machinery alone, no memtap work), and for the real agents'
requests recorded in ``tests/contrib/proxy/golden`` (Claude Code's ~50 KB first request,
Codex's ~41 KB, Gemini CLI's ~41 KB — also streamed as a JSON array, without ``alt=sse`` —,
Qwen Code's 60 KB, opencode's 33 KB, aider's 11 KB,
sent as their bytes with their headers, streamed as they ask): with nothing
to inject, and with history and recalled facts injected (a session named by
``x-memtap-session`` whose earlier turns and facts match). Median and p90 latency and time
to the first body byte, sequentially, direct and through the proxy in alternating rounds
(``--runs``; the figures are the medians of the rounds' medians, so a busy moment of a
shared machine moves one round, not the result); the proxy process's CPU time per request
(Linux); then requests/s with 32 concurrent clients. Counts and time are bounded; nothing
leaves 127.0.0.1.

``--only new-sessions`` sends an agent's recorded request (``--agents``, default Claude
Code; ``all``) as the first ``--turns`` requests of ``--sessions`` new sessions: new session
ids (``--vary id``), a new question (``prompt``: agents naming no session are told apart by
it), or both (the default), after the same seeded facts; each request direct and through the
proxy back to back. It prints the added time to the first byte and to the whole answer per
position in the session (request 1: a new session's first), and the proxy's CPU per request
(the whole process, and its event loop's thread alone: the request path).

    python benchmarks/proxy.py [--requests 400] [--runs 5] [--concurrency 32] [--seconds 5]
                               [--only chat|agents|new-sessions] [--sessions 60] [--turns 10]
                               [--vary both|id|prompt] [--agents "Claude Code"|all] [--settle 8]

``--settle`` leaves the proxy idle that many seconds before measuring: it loads its model
and quick table in the background when no request runs, so without it a short run measures
recall by words alone (a proxy just started), not a proxy that has been running a while.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

BODY = {"model": "bench", "messages": [{"role": "user", "content": "hello benchmark"}]}
ANSWER = json.dumps(
    {
        "id": "chatcmpl-b",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    event = {
        "id": "chatcmpl-b",
        "object": "chat.completion.chunk",
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


SSE = [_chunk("Hel"), _chunk("lo"), _chunk(None, "stop"), b"data: [DONE]\n\n"]

GOLDEN = Path(__file__).parents[1] / "tests" / "contrib" / "proxy" / "golden"


def _event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


_MESSAGE = {"id": "msg_b", "type": "message", "role": "assistant", "model": "bench", "content": []}
_USAGE = {"input_tokens": 3, "output_tokens": 1}
#: Anthropic Messages: a whole answer, and its event stream.
ANTHROPIC_ANSWER = json.dumps(
    {**_MESSAGE, "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "usage": _USAGE}
).encode()
ANTHROPIC_SSE = [
    _event("message_start", {"type": "message_start", "message": {**_MESSAGE, "usage": _USAGE}}),
    _event(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    _event(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
    ),
    _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
    _event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": _USAGE}),
    _event("message_stop", {"type": "message_stop"}),
]
_ITEM = {"id": "msg_b", "type": "message", "status": "completed", "role": "assistant"}
_RESPONSE = {"id": "resp_b", "object": "response", "model": "bench", "status": "completed"}
_OUTPUT = [{**_ITEM, "content": [{"type": "output_text", "text": "hi", "annotations": []}]}]
_RESPONSES_USAGE = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
#: OpenAI Responses: a whole answer, and its event stream.
RESPONSES_ANSWER = json.dumps({**_RESPONSE, "output": _OUTPUT, "usage": _RESPONSES_USAGE}).encode()
RESPONSES_SSE = [
    _event(
        "response.created",
        {"type": "response.created", "response": {**_RESPONSE, "status": "in_progress", "output": []}},
    ),
    _event(
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "item_id": "msg_b",
            "output_index": 0,
            "content_index": 0,
            "delta": "hi",
        },
    ),
    _event(
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": 0, "item": _OUTPUT[0]},
    ),
    _event(
        "response.completed",
        {
            "type": "response.completed",
            "response": {**_RESPONSE, "output": _OUTPUT, "usage": _RESPONSES_USAGE},
        },
    ),
]


def _gemini(text: str, finish: bool) -> dict:
    candidate: dict = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
    chunk: dict = {"candidates": [candidate], "modelVersion": "bench"}
    if finish:
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}
    return chunk


#: Gemini generateContent: a whole answer, its SSE stream (``alt=sse``: CRLF pairs), and
#: the same chunks as one streamed JSON array (no ``alt=sse``: an element per write).
GEMINI_ANSWER = json.dumps(_gemini("hi", True)).encode()
GEMINI_SSE = [
    b"data: " + json.dumps(_gemini(t, f)).encode() + b"\r\n\r\n" for t, f in (("h", False), ("i", True))
]
GEMINI_ARRAY = [
    b"[" + json.dumps(_gemini("h", False)).encode(),
    b"\r\n,\r\n" + json.dumps(_gemini("i", True)).encode(),
    b"]",
]


# -- the upstream (run in its own process) -------------------------------------------------


class _Upstream(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name == "content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            body, self.buf = self.buf[head_end + 4 : end], self.buf[end:]
            path = head.split(" ", 2)[1]
            stream = b'"stream":true' in body.replace(b" ", b"") or ":streamgeneratecontent" in path
            self._answer(path, stream, len(body))

    def _answer(self, path: str, stream: bool, received: int) -> None:
        """The protocol's answer; ``x-bench-received`` tells the client the body's size (to
        see whether the proxy injected anything)."""
        answer, events = ANSWER, SSE
        if path.startswith("/v1/messages"):
            answer, events = ANTHROPIC_ANSWER, ANTHROPIC_SSE
        elif path.startswith("/v1/responses"):
            answer, events = RESPONSES_ANSWER, RESPONSES_SSE
        elif "generatecontent" in path:  # (the head is read lower-cased)
            answer, events = GEMINI_ANSWER, GEMINI_SSE if "alt=sse" in path else GEMINI_ARRAY
        size = b"x-bench-received: %d\r\n" % received
        if not stream:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n"
            self.transport.write(head % (size, len(answer)) + answer)
            return
        kind = b"application/json" if events is GEMINI_ARRAY else b"text/event-stream"
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\n%stransfer-encoding: chunked\r\n\r\n" % (kind, size)
        )
        for event in events:
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.transport.write(b"0\r\n\r\n")


def run_upstream(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Upstream, "127.0.0.1", port, reuse_address=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# -- measuring -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            httpx.post(url, json=BODY, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


WORDS = ["apple", "river", "mountain", "cloud", "violin", "tiger"]
WORDS += ["garden", "rocket", "silver", "ocean", "pencil", "thunder"]


def varied(i: int) -> dict:
    """A chat body whose user message differs from call to call (recall cannot reuse the
    embedding of an earlier query)."""
    text = f"{WORDS[i % len(WORDS)]} and {WORDS[(i * 7 + 3) % len(WORDS)]}, question {i}"
    return {**BODY, "messages": [{"role": "user", "content": text}]}


@dataclass(frozen=True)
class Raw:
    """A recorded request: its body's bytes and the headers its agent sent."""

    content: bytes
    headers: dict[str, str]


def agent_request(name: str, **extra: str) -> Raw:
    """A request recorded from a real agent (``tests/contrib/proxy/golden``)."""
    headers = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    headers = {k: v for k, v in headers.items() if k not in ("accept",)}
    return Raw((GOLDEN / f"{name}.json").read_bytes(), {**headers, **extra})


#: Pause between sequential requests (``--gap-ms``): an agent waits for its model and runs
#: its tools between calls, so what the proxy does after an answer is sent does not delay
#: the next request; 0 sends back to back, which counts that work too.
GAP_SECONDS = 0.0


def sequential(
    url: str, n: int, stream: bool, body: dict | Raw | None = None, vary: bool = False
) -> tuple[list[float], list[float]]:
    body = body or ({**BODY, "stream": True} if stream else BODY)
    totals, firsts = [], []

    def send(client: httpx.Client, body: dict | Raw) -> Any:
        if isinstance(body, Raw):
            return client.stream("POST", url, content=body.content, headers=body.headers)
        return client.stream("POST", url, json=body)

    with httpx.Client(timeout=10) as client:
        for _ in range(20):  # warm-up
            with send(client, body) as r:
                r.read()
        for i in range(n):
            if vary:
                body = varied(i)
            if GAP_SECONDS:
                time.sleep(GAP_SECONDS)
            t0 = time.perf_counter()
            with send(client, body) as r:
                first = None
                for _chunk in r.iter_raw():
                    if first is None:
                        first = time.perf_counter() - t0
            totals.append(time.perf_counter() - t0)
            firsts.append(first or 0.0)
    return totals, firsts


def cpu_seconds(pid: int, thread: bool = False) -> float | None:
    """User + system CPU time of process ``pid`` (Linux), else ``None``; with ``thread``,
    of its main thread only (the proxy's event loop: the request path)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat" if thread else f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _concurrent(url: str, clients: int, seconds: float, limit: int, stream: bool) -> tuple[int, float]:
    body = {**BODY, "stream": True} if stream else BODY
    done = 0
    end = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < end and done < limit:
                r = await client.post(url, json=body)
                assert r.status_code == 200, r.text
                done += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return done, time.perf_counter() - t0


#: Agents asking new questions at once, each after a think time (``paced``).
PACED_CLIENTS = 8
PACED_GAP = 0.25


def unheard(i: int) -> dict:
    """A chat body with a question that has a word no stored fact has (its letters spell
    ``i``): the words cannot settle it, so recall asks the full model for its vector."""
    word = "".join(chr(ord("a") + int(d)) for d in str(i))
    return {**BODY, "messages": [{"role": "user", "content": f"what about the {word}zy plan?"}]}


async def _paced(
    url: str, clients: int, seconds: float, gap: float, first: int
) -> tuple[list[float], list[float]]:
    """``clients`` agents, each sending a request ``gap`` seconds after its last answer, for
    ``seconds``: half of them a new question every time (:func:`unheard`), half the same
    one (its vector made once, its search remembered). The latencies of each half. Slower
    than the concurrent run's back-to-back clients, so that recall waits for the full
    model for the new questions (it stops waiting above a quarter of a core of queries):
    that wait must not hold up the requests that need no model, on the same event loop."""
    new: list[float] = []
    same: list[float] = []
    end = time.perf_counter() + seconds
    count = first
    async with httpx.AsyncClient(timeout=10) as client:

        async def agent(i: int) -> None:
            nonlocal count
            await asyncio.sleep(gap * i / clients)
            while time.perf_counter() < end:
                count += 1
                body = unheard(count) if i % 2 == 0 else BODY
                t0 = time.perf_counter()
                r = await client.post(url, json=body)
                (new if i % 2 == 0 else same).append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
                await asyncio.sleep(gap)

        await asyncio.gather(*(agent(i) for i in range(clients)))
    return new, same


def ms(values: list[float], q: float = 0.5) -> float:
    values = sorted(values)
    return 1000 * values[min(len(values) - 1, int(q * len(values)))]


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def rounds(
    direct: str,
    through: str,
    proxy_pid: int,
    args: argparse.Namespace,
    stream: bool,
    body: dict | Raw | None,
    vary: bool = False,
) -> dict[str, tuple[float, float]]:
    """Alternating direct / proxy rounds: per figure, (direct, proxy) medians of the rounds'
    medians, plus the proxy's CPU ms per request (the whole process, and its event loop's
    thread: the request path)."""
    figures: dict[str, tuple[list[float], list[float]]] = {}
    cpu: list[float] = []
    loop_cpu: list[float] = []
    for _ in range(args.runs):
        d_tot, d_first = sequential(direct, args.requests, stream, body, vary)
        c0, l0 = cpu_seconds(proxy_pid), cpu_seconds(proxy_pid, thread=True)
        p_tot, p_first = sequential(through, args.requests, stream, body, vary)
        c1, l1 = cpu_seconds(proxy_pid), cpu_seconds(proxy_pid, thread=True)
        if c0 is not None and c1 is not None:
            cpu.append(1000 * (c1 - c0) / (args.requests + 20))
        if l0 is not None and l1 is not None:
            loop_cpu.append(1000 * (l1 - l0) / (args.requests + 20))
        for label, d, p in (
            ("median", ms(d_tot), ms(p_tot)),
            ("p90", ms(d_tot, 0.9), ms(p_tot, 0.9)),
            ("first byte median", ms(d_first), ms(p_first)),
        ):
            pair = figures.setdefault(label, ([], []))
            pair[0].append(d)
            pair[1].append(p)
    out = {label: (median(d), median(p)) for label, (d, p) in figures.items()}
    if cpu:
        out["proxy CPU per request"] = (0.0, median(cpu))
    if loop_cpu:
        out["proxy event loop CPU per request"] = (0.0, median(loop_cpu))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400, help="sequential calls per round")
    parser.add_argument("--runs", type=int, default=5, help="alternating direct/proxy rounds")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--history-messages", type=int, default=None)
    parser.add_argument(
        "--only",
        choices=["chat", "agents", "new-sessions", "paced"],
        default=None,
        help="one part of the benchmark",
    )
    parser.add_argument(
        "--sessions", type=int, default=60, help="--only new-sessions: new sessions per agent"
    )
    parser.add_argument("--turns", type=int, default=10, help="--only new-sessions: requests per new session")
    parser.add_argument(
        "--vary",
        choices=["both", "id", "prompt"],
        default="both",
        help="--only new-sessions: what is new in a new session (its id, its prompt, both)",
    )
    parser.add_argument(
        "--store",
        default="memory://",
        help="the proxy's store (default: in memory; a new DuckDB file: duckdb:///path)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="--only new-sessions: no seeded facts (a fresh store)"
    )
    parser.add_argument(
        "--agents",
        default="Claude Code",
        help="--only new-sessions: comma-separated agent names (or 'all')",
    )
    parser.add_argument(
        "--gap-ms", type=float, default=0.0, help="pause between sequential requests (an agent's think time)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to leave the proxy idle once it answers, before measuring (its model and quick "
        "table load in the background, when no request runs: a proxy that has been running a while)",
    )
    args = parser.parse_args()
    global GAP_SECONDS
    GAP_SECONDS = args.gap_ms / 1000

    up_port, proxy_port = free_port(), free_port()
    up = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port)])
    base = f"http://127.0.0.1:{up_port}"
    cmd = [
        sys.executable,
        "-m",
        "memtap.cli",
        "proxy",
        "--port",
        str(proxy_port),
        "--store",
        args.store,
    ]
    cmd += ["--openai-upstream", base, "--anthropic-upstream", base, "--gemini-upstream", base]
    cmd += ["--log-level", "warning"]
    # One running session for the chat calls (as before sessions were derived from each
    # conversation): their single messages get the session's history injected.
    cmd += ["--session", "bench"]
    if args.history_messages is not None:
        cmd += ["--history-messages", str(args.history_messages)]
    # The proxy's spool and caches go to a home of the run's own, not the user's memtap home.
    home = tempfile.TemporaryDirectory(prefix="memtap-bench-")
    proxy = subprocess.Popen(cmd, env={**os.environ, "PYTHONHASHSEED": "0", "MEMTAP_HOME": home.name})
    try:
        direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
        through = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
        wait_for(direct)
        wait_for(through)
        time.sleep(args.settle)
        print(f"{args.runs} rounds of {args.requests} sequential calls each way; medians of the rounds")
        print(f"{'':42}{'direct':>10}{'proxy':>10}{'added':>10}")
        if args.only == "new-sessions":
            new_sessions(f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{proxy_port}", proxy.pid, args)
            return
        if args.only == "paced":
            paced(direct, through, args)
            return
        if args.only != "chat":
            agents(f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{proxy_port}", proxy.pid, args)
        if args.only == "agents":
            return
        kinds: list[tuple[str, str, str, bool, dict | None]] = [
            ("JSON", direct, through, False, None),
            ("SSE", direct, through, True, None),
            (
                "pass-through",
                direct.replace("chat/completions", "embeddings"),
                through.replace("chat/completions", "embeddings"),
                False,
                BODY,
            ),
        ]
        for kind, d_url, p_url, stream, body in kinds:
            for label, (d, p) in rounds(d_url, p_url, proxy.pid, args, stream, body).items():
                if "CPU" in label:
                    print(f"{kind + ' ' + label + ' ms':42}{'':10}{p:10.3f}")
                else:
                    print(f"{kind + ' ' + label + ' ms':42}{d:10.3f}{p:10.3f}{p - d:+10.3f}")
        for kind, stream in (("JSON", False), ("SSE", True)):
            limit = args.requests * 10
            d_n, d_s = asyncio.run(_concurrent(direct, args.concurrency, args.seconds, limit, stream))
            p_n, p_s = asyncio.run(_concurrent(through, args.concurrency, args.seconds, limit, stream))
            label = f"{kind} req/s ({args.concurrency} clients)"
            print(f"{label:42}{d_n / d_s:10.0f}{p_n / p_s:10.0f}")
        # Last, as it leaves work behind: a new user message on every call, as in real use
        # (recall embeds each new query; every captured turn is embedded in the background).
        for label, (d, p) in rounds(direct, through, proxy.pid, args, False, None, vary=True).items():
            label = "JSON, new text: " + label
            if "CPU" in label:
                print(f"{label + ' ms':42}{'':10}{p:10.3f}")
            else:
                print(f"{label + ' ms':42}{d:10.3f}{p:10.3f}{p - d:+10.3f}")
        paced(direct, through, args)
    finally:
        for process in (proxy, up):
            process.terminate()
            process.wait(10)
        home.cleanup()


def paced(direct: str, through: str, args: argparse.Namespace) -> None:
    """Several agents at a moderate pace (:func:`_paced`): the added latency of the
    requests asking a new question, and of those asking one asked before."""
    d_new, d_same = asyncio.run(_paced(direct, PACED_CLIENTS, args.seconds, PACED_GAP, 10**6))
    p_new, p_same = asyncio.run(_paced(through, PACED_CLIENTS, args.seconds, PACED_GAP, 2 * 10**6))
    for kind, d_lat, p_lat in (("new", d_new, p_new), ("asked before", d_same, p_same)):
        label = f"paced, {kind} question"
        for q, name in ((0.5, "median"), (0.9, "p90"), (0.99, "p99")):
            d, p = ms(d_lat, q), ms(p_lat, q)
            print(f"{label + ': ' + name + ' ms':42}{d:10.3f}{p:10.3f}{p - d:+10.3f}")


def report(kind: str, figures: dict[str, tuple[float, float]]) -> None:
    for label, (d, p) in figures.items():
        if "CPU" in label:
            print(f"{kind + ' ' + label + ' ms':42}{'':10}{p:10.3f}")
        else:
            print(f"{kind + ' ' + label + ' ms':42}{d:10.3f}{p:10.3f}{p - d:+10.3f}")


#: Earlier turns of the session the "injected" agent requests name (history), and facts of
#: the same entity, in another session, that their prompt recalls.
HISTORY_SEED = ["We moved the build to GitHub Actions last week.", "The staging cluster runs on Kubernetes."]
FACT_SEED = [
    "My notes.txt file lists when the deploy key rotates.",
    "I keep release notes for the team in notes.txt.",
    "The notes in notes.txt say the deploy key rotates on Fridays.",
]


def seed(proxy: str) -> None:
    """Give the default entity a session with earlier turns and recallable facts."""
    with httpx.Client(timeout=10) as client:
        for session, texts in (("bench-history", HISTORY_SEED), ("bench-facts", FACT_SEED)):
            for text in texts:
                body = {"model": "bench", "messages": [{"role": "user", "content": text}]}
                client.post(proxy + "/v1/chat/completions", json=body, headers={"x-memtap-session": session})
    time.sleep(1.0)  # stored, memorized into facts and indexed by the proxy's workers


def received(proxy: str, path: str, request: Raw) -> int:
    """How many bytes the upstream got for ``request`` sent through the proxy."""
    r = httpx.post(proxy + path, content=request.content, headers=request.headers, timeout=10)
    return int(r.headers["x-bench-received"])


#: What the user typed in the recorded Qwen Code, opencode and aider requests.
RECORDED_PROMPT = b"My favourite colour is teal."


#: The recorded agents' requests: (agent, path, golden name).
AGENT_CASES = [
    ("Claude Code", "/v1/messages", "claude_code_first"),
    ("Codex", "/v1/responses", "codex_first"),
    (
        "Gemini CLI",
        "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
        "gemini_cli_first",
    ),
    # The same body streamed as one JSON array (no alt=sse), as REST clients ask for it.
    (
        "Gemini array",
        "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent",
        "gemini_cli_first",
    ),
    ("Qwen Code", "/v1/chat/completions", "qwen_code_first"),
    ("opencode", "/v1/chat/completions", "opencode_first"),
    ("aider", "/v1/chat/completions", "aider_gpt4o_first"),
]


def agents(direct: str, proxy: str, proxy_pid: int, args: argparse.Namespace) -> None:
    """The real agents' requests: nothing injected, then history and recall injected."""
    seed(proxy)
    for agent, path, name in AGENT_CASES:
        # An entity with nothing remembered; then the seeded one, in a session named by header.
        plain = {"x-memtap-entity": f"bench-new-{name}"}
        for label, extra in (
            ("nothing injected", plain),
            ("history+recall", {"x-memtap-session": "bench-history"}),
        ):
            request = agent_request(name, **extra)
            if RECORDED_PROMPT in request.content:
                # Each agent its own question: an earlier agent's turn in the seeded session
                # would be this one's own words, and never injected again.
                asked = f"What do you know about our deploys, {agent}?".encode()
                request = Raw(request.content.replace(RECORDED_PROMPT, asked), request.headers)
            got = received(proxy, path, request)
            if (got != len(request.content)) != (extra is not plain):
                raise RuntimeError(f"{agent} {label}: the upstream got {got} bytes of {len(request.content)}")
            kind = f"{agent} {len(request.content) // 1000} KB, {label}:"
            print(f"{kind} upstream got {got} bytes")
            report(kind, rounds(direct + path, proxy + path, proxy_pid, args, True, request))


#: The ids a recorded request names its session by (in its headers and body): a new session
#: gets new ones of the same length.
RECORDED_IDS = [
    "00000000-0000-4000-8000-000000000001",  # Claude Code
    "00000000-0000-4000-8000-000000000007",  # Codex (session, thread)
    "ses_0000000000000000000000test",  # opencode
]


def new_session(request: Raw, agent: str, n: int, vary: str = "both") -> Raw:
    """``request`` as the first request of a new session: its session ids replaced by new
    ones, and its prompt made new (agents naming no session are told apart by it)."""
    content, headers = request.content, dict(request.headers)
    for old in RECORDED_IDS if vary != "prompt" else ():
        new = old[:-8] + f"{n:08x}"
        content = content.replace(old.encode(), new.encode())
        headers = {k: v.replace(old, new) for k, v in headers.items()}
    asked = f"What do you know about our deploys, {agent}?".encode()
    if vary != "id":
        asked = f"What do you know about our deploys, {agent}? (session {n})".encode()
    for prompt in (RECORDED_PROMPT, b"Read notes.txt and tell me what it says."):
        content = content.replace(prompt, asked)
    return Raw(content, headers)


def answer_times(client: httpx.Client, url: str, request: Raw) -> tuple[float, float]:
    """Seconds to the first body byte of ``request``'s answer, and to its last."""
    t0 = time.perf_counter()
    first = None
    with client.stream("POST", url, content=request.content, headers=request.headers) as r:
        for _chunk in r.iter_raw():
            if first is None:
                first = time.perf_counter() - t0
    whole = time.perf_counter() - t0
    return first or whole, whole


def new_sessions(direct: str, proxy: str, proxy_pid: int, args: argparse.Namespace) -> None:
    """Each agent's recorded request as the first ``--turns`` requests of ``--sessions``
    new sessions (new session ids, a new prompt, the seeded entity: recall, and history
    where the agent gets it), each request sent direct and through the proxy back to back
    (the order alternating): added time to the first byte and to the whole answer per
    position in the session, and
    the proxy's CPU per request (its process's whole CPU over the run: background work
    included; and its event loop's thread alone: the request path). ``--fresh``: nothing
    seeded (the store holds only what these requests leave)."""
    if not args.fresh:
        seed(proxy)
    wanted = None if args.agents == "all" else {a.strip() for a in args.agents.split(",")}
    for agent, path, name in AGENT_CASES:
        if wanted is not None and agent not in wanted:
            continue
        base = agent_request(name)
        # Per position in the session: (first byte, whole answer) of each request.
        direct_times: list[list[tuple[float, float]]] = [[] for _ in range(args.turns)]
        proxy_times: list[list[tuple[float, float]]] = [[] for _ in range(args.turns)]
        with httpx.Client(timeout=10) as d_client, httpx.Client(timeout=10) as p_client:
            for _ in range(20):  # warm-up: connections, the same session again and again
                answer_times(d_client, direct + path, base)
                answer_times(p_client, proxy + path, base)
            load0, c0, t0 = os.getloadavg()[0], cpu_seconds(proxy_pid), time.perf_counter()
            loop0 = cpu_seconds(proxy_pid, thread=True)
            for s in range(args.sessions):
                request = new_session(base, agent, s + 1, args.vary)
                for k in range(args.turns):
                    if (s + k) % 2:
                        d = answer_times(d_client, direct + path, request)
                        p = answer_times(p_client, proxy + path, request)
                    else:
                        p = answer_times(p_client, proxy + path, request)
                        d = answer_times(d_client, direct + path, request)
                    direct_times[k].append(d)
                    proxy_times[k].append(p)
            c1, elapsed = cpu_seconds(proxy_pid), time.perf_counter() - t0
            loop1 = cpu_seconds(proxy_pid, thread=True)
        print(
            f"{agent} {len(base.content) // 1000} KB, {args.sessions} new sessions x {args.turns} "
            f"requests ({elapsed:.1f} s, load {load0:.2f} -> {os.getloadavg()[0]:.2f})"
        )
        for k in range(args.turns):
            for what, which in (("first byte", 0), ("whole answer", 1)):
                d = ms([t[which] for t in direct_times[k]])
                p = ms([t[which] for t in proxy_times[k]])
                label = f"  request {k + 1} {what} median ms"
                print(f"{label:42}{d:10.3f}{p:10.3f}{p - d:+10.3f}")
        n = args.sessions * args.turns
        if c0 is not None and c1 is not None:
            print(f"{'  proxy CPU per request ms':42}{'':10}{1000 * (c1 - c0) / n:10.3f}")
        if loop0 is not None and loop1 is not None:
            print(f"{'  of which its event loop (request path)':42}{'':10}{1000 * (loop1 - loop0) / n:10.3f}")
        print("  " + recall_status(proxy))


def recall_status(proxy: str) -> str:
    """The proxy's recall counters since it started (its ``mem:status`` answer's line)."""
    body = {"model": "bench", "messages": [{"role": "user", "content": "mem:status"}]}
    text = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=10).text
    found = text.find("recall since start")
    return json.loads(f'"{text[found:].split(chr(34))[0]}"') if found >= 0 else "(no recall status)"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-upstream":
        run_upstream(int(sys.argv[2]))
    else:
        main()
