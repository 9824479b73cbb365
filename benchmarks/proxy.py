"""What the memtap proxy adds to a call: direct to a local upstream vs through the proxy.

Three processes on loopback: a minimal asyncio upstream (fixed Chat Completions answers, JSON
and SSE, keep-alive, TCP_NODELAY), ``memtap proxy`` (one uvicorn worker, in-memory store,
history injection on), and this client (httpx). Measured for JSON and SSE chat calls, and for
a passed-through route (``/v1/embeddings``: the HTTP machinery alone, no memtap work): median
and p90 latency and time to the first body byte, sequentially, direct and through the proxy
in alternating rounds (``--runs``; the figures are the medians of the rounds' medians, so a
busy moment of a shared machine moves one round, not the result); the proxy process's CPU
time per request (Linux); then requests/s with 32 concurrent clients. Counts and time are
bounded; nothing leaves 127.0.0.1.

    python benchmarks/proxy.py [--requests 400] [--runs 5] [--concurrency 32] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

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
            self._answer(b'"stream":true' in body.replace(b" ", b""))

    def _answer(self, stream: bool) -> None:
        if not stream:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            self.transport.write(head % len(ANSWER) + ANSWER)
            return
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for event in SSE:
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


def sequential(
    url: str, n: int, stream: bool, body: dict | None = None, vary: bool = False
) -> tuple[list[float], list[float]]:
    body = body or ({**BODY, "stream": True} if stream else BODY)
    totals, firsts = [], []
    with httpx.Client(timeout=10) as client:
        for _ in range(20):  # warm-up
            client.post(url, json=body).read()
        for i in range(n):
            if vary:
                body = varied(i)
            t0 = time.perf_counter()
            with client.stream("POST", url, json=body) as r:
                first = None
                for _chunk in r.iter_raw():
                    if first is None:
                        first = time.perf_counter() - t0
            totals.append(time.perf_counter() - t0)
            firsts.append(first or 0.0)
    return totals, firsts


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` (Linux), else ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
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
    body: dict | None,
    vary: bool = False,
) -> dict[str, tuple[float, float]]:
    """Alternating direct / proxy rounds: per figure, (direct, proxy) medians of the rounds'
    medians, plus the proxy's CPU ms per request."""
    figures: dict[str, tuple[list[float], list[float]]] = {}
    cpu: list[float] = []
    for _ in range(args.runs):
        d_tot, d_first = sequential(direct, args.requests, stream, body, vary)
        c0 = cpu_seconds(proxy_pid)
        p_tot, p_first = sequential(through, args.requests, stream, body, vary)
        c1 = cpu_seconds(proxy_pid)
        if c0 is not None and c1 is not None:
            cpu.append(1000 * (c1 - c0) / (args.requests + 20))
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
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400, help="sequential calls per round")
    parser.add_argument("--runs", type=int, default=5, help="alternating direct/proxy rounds")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--history-messages", type=int, default=None)
    args = parser.parse_args()

    up_port, proxy_port = free_port(), free_port()
    up = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(up_port)])
    cmd = [sys.executable, "-m", "memtap.cli", "proxy", "--port", str(proxy_port), "--store", "memory://"]
    cmd += ["--openai-upstream", f"http://127.0.0.1:{up_port}", "--log-level", "warning"]
    if args.history_messages is not None:
        cmd += ["--history-messages", str(args.history_messages)]
    proxy = subprocess.Popen(cmd, env={**os.environ, "PYTHONHASHSEED": "0"})
    try:
        direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
        through = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
        wait_for(direct)
        wait_for(through)
        print(f"{args.runs} rounds of {args.requests} sequential calls each way; medians of the rounds")
        print(f"{'':42}{'direct':>10}{'proxy':>10}{'added':>10}")
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
                if label == "proxy CPU per request":
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
    finally:
        for process in (proxy, up):
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-upstream":
        run_upstream(int(sys.argv[2]))
    else:
        main()
