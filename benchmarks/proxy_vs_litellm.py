"""Proxy throughput with ``wrk``: direct, ``memtap proxy`` and LiteLLM's proxy in one run.

One minimal asyncio upstream (``benchmarks/proxy.py``'s: fixed Chat Completions answers,
JSON and SSE) on loopback, and in front of it each target, all started at the beginning and
kept running:

- ``direct``: the upstream itself (what the machine gives with no proxy at all);
- ``memtap``: ``memtap proxy`` with its defaults (one worker, its DuckDB store in a home of
  its own, history and recall on, the local MiniLM embedder);
- ``memtap-embedder-off``: the same with ``MEMTAP_EMBEDDER=off``;
- ``memtap-pg-w1`` / ``memtap-pg-w2``: ``memtap proxy --workers 1`` / ``--workers 2`` on a
  fresh schema of a PostgreSQL server (``--pg``; more than one worker needs a shared store,
  and one worker on the same store is the baseline of the two);
- ``litellm``: LiteLLM's proxy (``--litellm PATH``: its ``litellm`` command), ``--config``
  with one model routed to the upstream as an OpenAI-compatible ``api_base``, one uvicorn
  worker, its access log off (memtap's is off too), no master key (loopback only).

The load generator is ``wrk`` (C, event-driven), so that it takes little of the machine's
cores: each target gets, per round, JSON chat calls and streamed (``"stream": true``) ones
from ``--connections`` connections on ``--threads`` threads for ``--seconds`` after a
``--warmup``, then JSON calls from one connection (``--sequential`` seconds: the CPU a
request costs when nothing else runs). Every call names one session (``x-memtap-session``,
sent to every target) and asks the next of 16 questions (``--questions rotate``), so that
memtap injects the session's last 20 messages into each and recalls for it (``same``: one
fixed question, which memtap injects nothing into; ``new``: a new question each call, each
embedded by the full model). Targets alternate in ``--rounds`` rounds (the order
rotating), so that a busy moment of a shared machine moves one round of every target, not one
target; figures are the medians of the rounds. Reported per target: req/s and p50 / p99
latency (wrk's), CPU ms per request of each server process (utime + stime from
``/proc/PID/stat``, a memtap parent's worker processes included, from the start of the load
until the process is idle again: background work such as capture and embedding counted), of
the upstream, and of wrk. Every answer is checked by wrk's Lua (status 200 and the
upstream's answer in the body: ``"hi"``, or ``[DONE]`` for a stream); any other answer, or a
connection error or time-out, fails the run. Every memtap store's exchange count is checked
against the answers it gave, and one request per target reports how many bytes the upstream
got (history injected or not).

Without ``wrk`` the script says how to install it and falls back to an httpx load generator
(in this process: it competes with the targets for the cores, so its req/s is a floor).

Install the two tools beside the project (neither is a dependency of memtap)::

    apt-get install -y wrk
    python3 -m venv /work/venvs/litellm-proxy
    /work/venvs/litellm-proxy/bin/pip install 'litellm[proxy]'

Run::

    python benchmarks/proxy_vs_litellm.py --litellm /work/venvs/litellm-proxy/bin/litellm
        [--rounds 3] [--seconds 10] [--warmup 2] [--sequential 5] [--connections 32]
        [--threads 2] [--targets direct,memtap,...] [--questions rotate|same|new]
        [--pg postgresql://...] [--json FILE]

Counts and time are bounded; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from proxy import BODY, WORDS, cpu_seconds, free_port

HERE = Path(__file__).resolve()
CHAT = "/v1/chat/completions"
TARGETS = ["direct", "memtap", "memtap-embedder-off", "memtap-pg-w1", "memtap-pg-w2", "litellm"]
#: Issue 37's figures for memtap's proxy before (32 clients, the httpx generator), and
#: LiteLLM's in the same run.
ANCHORS = {"json": 181.0, "sse": 204.0}
LITELLM_ANCHORS = {"json": 107.0, "sse": 54.0}

#: The session every call names (``x-memtap-session``, sent to every target alike): the
#: calls of all connections are one conversation's turns, so memtap injects up to 20 earlier
#: messages into each (with one fixed question it would inject nothing: an earlier turn that
#: is the question itself is left out).
SESSION = "bench"
#: The questions (``--questions rotate``): each call the next of these, so that the history
#: injected is never the question itself; the same texts come back, so their embeddings are
#: made once (what embedding each new text costs is ``benchmarks/soak.py``'s subject).
QUESTIONS = [
    f"What do you know about the {WORDS[i % 12]} and the {WORDS[(i + 1 + 5 * (i // 12)) % 12]}?"
    for i in range(16)
]

#: wrk's script: POSTs of a chat body (``STREAM``: ``"stream": true``), its question per
#: ``MODE`` (``same``: one fixed question; ``rotate``: the next of ``QUESTIONS``; ``new``: a
#: new one each call); each answer checked (status 200 and ``EXPECT`` in the body); ``done``
#: prints one line of JSON that this script reads.
LUA = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["x-memtap-session"] = SESSION
local mode, stream, expect = MODE, STREAM, EXPECT
local questions = QUESTIONS
local words = WORDS
local threads = {}
local prepared = {}
local n = 0
bad = 0
sample = ""
tid = 0

local function body(text)
  local tail = stream and ', "stream": true' or ""
  return '{"model": "bench", "messages": [{"role": "user", "content": "' .. text .. '"}]' .. tail .. '}'
end

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  local texts = mode == "same" and {"hello benchmark"} or questions
  for i, text in ipairs(texts) do
    prepared[i] = wrk.format(nil, nil, nil, body(text))
  end
  n = tid * 7
end

function request()
  n = n + 1
  if mode == "new" then
    local text = string.format("What do you know about the %s and the %s, question %d-%d?",
      words[n % #words + 1], words[(n * 7 + 3) % #words + 1], tid, n)
    return wrk.format(nil, nil, nil, body(text))
  end
  return prepared[n % #prepared + 1]
end

function response(status, headers, answer)
  if status ~= 200 or not string.find(answer, expect, 1, true) then
    bad = bad + 1
    if sample == "" then
      sample = tostring(status) .. " " .. string.sub(answer, 1, 300)
    end
  end
end

function done(summary, latency, requests)
  local b, s = 0, ""
  for _, t in ipairs(threads) do
    b = b + t:get("bad")
    if s == "" then s = t:get("sample") end
  end
  local e = summary.errors
  io.write(string.format(
    'WRKRESULT {"requests": %d, "duration_us": %d, "status": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "timeout": %d, "bad": %d, "p50_us": %d, "p99_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout, b,
    latency:percentile(50), latency:percentile(99), latency.mean))
  if s ~= "" then io.write("WRKSAMPLE " .. s .. "\n") end
end
"""


def lua_script(directory: Path, mode: str, questions: str) -> Path:
    """wrk's script for ``mode`` (json, sse) and ``questions`` (same, rotate, new)."""
    values = {
        "SESSION": _lua_string(SESSION),
        "MODE": _lua_string(questions),
        "STREAM": "true" if mode == "sse" else "false",
        "EXPECT": _lua_string("[DONE]" if mode == "sse" else '"hi"'),
        "QUESTIONS": "{" + ", ".join(_lua_string(q) for q in QUESTIONS) + "}",
        "WORDS": "{" + ", ".join(_lua_string(w) for w in WORDS) + "}",
    }
    text = LUA
    for name, value in values.items():
        text = text.replace(f" = {name}\n", f" = {value}\n", 1)
    text = text.replace(
        "= MODE, STREAM, EXPECT", f"= {values['MODE']}, {values['STREAM']}, {values['EXPECT']}"
    )
    path = directory / f"{mode}.lua"
    path.write_text(text)
    return path


def question_body(mode: str, questions: str, i: int) -> dict[str, Any]:
    """The body the Lua script sends as its ``i``-th (for the httpx generator and probes)."""
    if questions == "same":
        text = "hello benchmark"
    elif questions == "rotate":
        text = QUESTIONS[i % len(QUESTIONS)]
    else:
        first, second = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
        text = f"What do you know about the {first} and the {second}, question 0-{i}?"
    body: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": text}]}
    return {**body, "stream": True} if mode == "sse" else body


def _lua_string(text: str) -> str:
    return "[=[" + text + "]=]"


# -- processes -----------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (a memtap parent's workers)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return found


def cpu_of(pids: list[int]) -> float:
    return sum(cpu_seconds(p) or 0.0 for p in pids)


def postgres_pids() -> list[int]:
    """The processes of a PostgreSQL server on this machine (all of its backends: another
    user's queries count too)."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in ("postgres", "postmaster"):
                found.append(int(comm.parent.name))
        except OSError:
            pass
    return found


def machine_busy() -> float:
    """Seconds of CPU the whole machine has spent busy (every core, every process)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass
class Target:
    name: str
    url: str
    proc: subprocess.Popen[bytes] | None = None
    store: str | None = None
    home: Path | None = None
    log: Path | None = None
    answered: int = 0
    injected: str = ""
    results: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def pids(self) -> list[int]:
        assert self.proc is not None
        return descendants(self.proc.pid)


def wait_ready(target: Target, deadline: float) -> None:
    """Until the target answers a chat call with 200 (the calls counted as answered)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if target.proc is not None and target.proc.poll() is not None:
            break
        try:
            r = httpx.post(target.url + CHAT, json=BODY, timeout=10)
            if r.status_code == 200:
                target.answered += 1
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    tail = target.log.read_text()[-3000:] if target.log and target.log.exists() else ""
    raise SystemExit(f"ERROR: {target.name} did not come up within {deadline:.0f} s\n{tail}")


def start_memtap(name: str, upstream: str, work: Path, args: argparse.Namespace) -> Target:
    port = free_port()
    home = work / name
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
    env.update(MEMTAP_HOME=str(home), PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "memtap.cli", "proxy", "--port", str(port)]
    cmd += ["--openai-upstream", upstream, "--log-level", "warning"]
    store = f"duckdb:///{home}/memtap.duckdb"
    if name == "memtap-embedder-off":
        env["MEMTAP_EMBEDDER"] = "off"
    if name.startswith("memtap-pg-"):
        schema = f"memtap_bench_{uuid.uuid4().hex[:10]}"
        store = f"{args.pg}{'&' if '?' in args.pg else '?'}schema={schema}"
        cmd += ["--store", store, "--workers", name.rsplit("-w", 1)[1]]
    log = work / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Target(name, f"http://127.0.0.1:{port}", proc, store, home, log)


LITELLM_CONFIG = """\
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: {upstream}/v1
      api_key: sk-bench
litellm_settings:
  telemetry: false
general_settings:
  # loopback only, like memtap proxy without --token: no key to check on either side
  dangerously_permit_weak_or_unset_master_key: true
"""
#: uvicorn's access log off (a line per request), as memtap runs with --log-level warning.
LITELLM_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"uvicorn.access": {"level": "WARNING"}},
}


def start_litellm(binary: str, upstream: str, work: Path) -> Target:
    port = free_port()
    home = work / "litellm"
    home.mkdir()
    config, logging_config = home / "config.yaml", home / "logging.json"
    config.write_text(LITELLM_CONFIG.format(upstream=upstream))
    logging_config.write_text(json.dumps(LITELLM_LOGGING))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    cmd = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--num_workers", "1", "--log_config", str(logging_config)]
    log = work / "litellm.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=home, stdout=out, stderr=subprocess.STDOUT)
    return Target("litellm", f"http://127.0.0.1:{port}", proc, None, home, log)


def stop(target: Target) -> None:
    if target.proc is None or target.proc.poll() is not None:
        return
    target.proc.send_signal(signal.SIGTERM)
    try:
        target.proc.wait(60)
    except subprocess.TimeoutExpired:
        target.proc.kill()
        target.proc.wait(10)


def settle(pids: list[int], limit: float, quiet: float = 0.03) -> float:
    """Wait until ``pids`` use less than ``quiet`` of a core over two 0.5 s windows in a row
    (their background work done), at most ``limit`` seconds; the seconds waited."""
    t0 = time.monotonic()
    calm = 0
    last = cpu_of(pids)
    while time.monotonic() - t0 < limit:
        time.sleep(0.5)
        now = cpu_of(pids)
        calm = calm + 1 if now - last < quiet * 0.5 else 0
        last = now
        if calm >= 2:
            break
    return time.monotonic() - t0


# -- load ----------------------------------------------------------------------------------


def run_wrk(url: str, script: Path, connections: int, threads: int, seconds: float) -> dict[str, Any]:
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
    cmd += ["-s", str(script), url]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in out.stdout.splitlines() if x.startswith("WRKRESULT ")), None)
    if line is None:
        raise SystemExit(f"ERROR: wrk gave no result for {url}:\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(line.removeprefix("WRKRESULT "))
    sample = next((x for x in out.stdout.splitlines() if x.startswith("WRKSAMPLE ")), "")
    result["sample"] = sample.removeprefix("WRKSAMPLE ")
    result["seconds"] = result["duration_us"] / 1e6
    result["gen_cpu"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return result


async def _httpx_load(
    url: str, mode: str, questions: str, connections: int, seconds: float
) -> dict[str, Any]:
    expect = b"[DONE]" if mode == "sse" else b'"hi"'
    latencies: list[float] = []
    bad = 0
    sample = ""
    end = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    count = 0
    headers = {"x-memtap-session": SESSION}
    async with httpx.AsyncClient(timeout=30, limits=limits, headers=headers) as client:

        async def worker() -> None:
            nonlocal bad, sample, count
            while time.perf_counter() < end:
                count += 1
                body = question_body(mode, questions, count)
                t0 = time.perf_counter()
                r = await client.post(url, json=body)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200 or expect not in r.content:
                    bad += 1
                    sample = sample or f"{r.status_code} {r.text[:300]}"

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - t0
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "seconds": elapsed,
        "status": 0,
        "connect": 0,
        "read": 0,
        "write": 0,
        "timeout": 0,
        "bad": bad,
        "sample": sample,
        "p50_us": 1e6 * latencies[n // 2] if n else 0.0,
        "p99_us": 1e6 * latencies[min(n - 1, int(0.99 * n))] if n else 0.0,
        "gen_cpu": 0.0,
    }


def load(
    url: str, mode: str, connections: int, threads: int, seconds: float, scripts: dict[str, Path] | None
) -> dict[str, Any]:
    if scripts is None:
        t0 = time.process_time()
        result = asyncio.run(_httpx_load(url, mode, QUESTION_MODE, connections, seconds))
        result["gen_cpu"] = time.process_time() - t0
        return result
    return run_wrk(url, scripts[mode], connections, min(threads, connections), seconds)


#: The phases of a target's turn in a round: (name, mode, sequential).
PHASES = [("json", "json", False), ("sse", "sse", False), ("seq", "json", True)]

ERRORS: list[str] = []
#: ``--questions``.
QUESTION_MODE = "rotate"


def phase(
    target: Target,
    upstream_pid: int,
    name: str,
    mode: str,
    sequential: bool,
    args: argparse.Namespace,
    scripts: dict[str, Path] | None,
) -> dict[str, float]:
    connections = 1 if sequential else args.connections
    seconds = args.sequential if sequential else args.seconds
    url = target.url + CHAT
    pids = target.pids()
    warm = load(url, mode, connections, args.threads, args.warmup, scripts)
    target.answered += int(warm["requests"])
    settle(pids, args.settle)
    pids = target.pids()
    pg = postgres_pids() if target.name.startswith("memtap-pg-") else []
    c0, u0, g0, m0 = cpu_of(pids), cpu_seconds(upstream_pid) or 0.0, cpu_of(pg), machine_busy()
    result = load(url, mode, connections, args.threads, seconds, scripts)
    c_load, m_load = cpu_of(pids) - c0, machine_busy() - m0
    u_load, g_load = (cpu_seconds(upstream_pid) or 0.0) - u0, cpu_of(pg) - g0
    waited = settle(pids, args.settle)
    c_all, u_all, g_all = cpu_of(pids) - c0, (cpu_seconds(upstream_pid) or 0.0) - u0, cpu_of(pg) - g0
    # (direct: the target is the upstream, counted once)
    measured = c_load + (0.0 if upstream_pid in pids else u_load) + g_load + result["gen_cpu"]
    n = int(result["requests"])
    target.answered += n
    failures = {k: result[k] for k in ("status", "connect", "read", "write", "timeout", "bad") if result[k]}
    if failures or n == 0:
        message = f"ERROR: {target.name} {name}: {n} answered, failures {failures} {result['sample']}"
        print(message, flush=True)
        ERRORS.append(message)
    n = max(n, 1)
    return {
        "rps": n / result["seconds"],
        "p50": result["p50_us"] / 1000,
        "p99": result["p99_us"] / 1000,
        "cpu": 1000 * c_all / n,
        "cpu_load": 1000 * c_load / n,
        "tail_s": waited,
        "upstream_cpu": 1000 * u_all / n,
        "gen_cpu": 1000 * result["gen_cpu"] / n,
        "pg_cpu": 1000 * g_all / n,
        # cores busy while the load ran: the target's processes, everything measured (target,
        # upstream, load generator, PostgreSQL), the whole machine (others' work included)
        "server_cores": c_load / result["seconds"],
        "measured_cores": measured / result["seconds"],
        "machine_cores": m_load / result["seconds"],
        "requests": n,
    }


def probe(target: Target) -> None:
    """One JSON call as the load sends them: how many bytes the upstream got of how many
    (more: memtap injected history or recalled facts)."""
    content = json.dumps(question_body("json", QUESTION_MODE, 5)).encode()
    headers = {"content-type": "application/json", "x-memtap-session": SESSION}
    r = httpx.post(target.url + CHAT, content=content, headers=headers, timeout=30)
    if r.status_code != 200:
        ERRORS.append(f"ERROR: {target.name}: probe answered {r.status_code}")
        return
    target.answered += 1
    got = r.headers.get("x-bench-received") or r.headers.get("llm_provider-x-bench-received") or "?"
    target.injected = f"upstream got {got} bytes of a {len(content)}-byte body"


def exchanges(target: Target) -> int | None:
    """The exchanges the target's store holds (read after it stopped)."""
    assert target.store is not None and target.home is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
    env.update(MEMTAP_HOME=str(target.home), MEMTAP_EMBEDDER="off")
    out = subprocess.run(
        [sys.executable, "-m", "memtap.cli", "stats", "--store", target.store],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    found = re.search(r"exchanges\D+(\d+)", out.stdout)
    return int(found.group(1)) if found else None


def drop_schema(store: str) -> None:
    import psycopg

    base, _, query = store.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&")).get("schema")
    if schema:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- report --------------------------------------------------------------------------------


def med(target: Target, phase_name: str, key: str) -> float:
    return statistics.median(r[key] for r in target.results.get(phase_name, [])) if target.results else 0.0


def table(targets: list[Target]) -> str:
    head = (
        "| target | JSON req/s | JSON p50 / p99 ms | SSE req/s | SSE p50 / p99 ms "
        "| server CPU ms/req JSON / SSE | sequential req/s | sequential server CPU ms/req "
        "| upstream / load generator / PostgreSQL CPU ms/req "
        "| cores busy (JSON): server / measured / machine |"
        "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [head]
    for t in targets:
        if not t.results:
            continue
        rows.append(
            f"| {t.name} | {med(t, 'json', 'rps'):.0f} | {med(t, 'json', 'p50'):.1f} / "
            f"{med(t, 'json', 'p99'):.1f} | {med(t, 'sse', 'rps'):.0f} | {med(t, 'sse', 'p50'):.1f} / "
            f"{med(t, 'sse', 'p99'):.1f} | {med(t, 'json', 'cpu'):.2f} / {med(t, 'sse', 'cpu'):.2f} "
            f"| {med(t, 'seq', 'rps'):.0f} | {med(t, 'seq', 'cpu'):.2f} "
            f"| {med(t, 'json', 'upstream_cpu'):.2f} / {med(t, 'json', 'gen_cpu'):.2f} / "
            f"{med(t, 'json', 'pg_cpu'):.2f} | {med(t, 'json', 'server_cores'):.2f} / "
            f"{med(t, 'json', 'measured_cores'):.2f} / {med(t, 'json', 'machine_cores'):.2f} |"
        )
    return "\n".join(rows)


def verdict(targets: list[Target]) -> list[str]:
    """Issue 37's proxy targets: >= 2x its req/s (181 JSON / 204 SSE, when LiteLLM gave
    107 / 54), read two ways: the req/s themselves, and the ratio to LiteLLM in this run
    (>= 2 x 181/107 JSON, 2 x 204/54 SSE: the machine's speed of the day divided out); and
    <= 2 ms of CPU per sequential request, background work included."""
    by = {t.name: t for t in targets if t.results}
    lines = []
    lite = by.get("litellm")
    for name in ("memtap", "memtap-embedder-off", "memtap-pg-w1", "memtap-pg-w2"):
        t = by.get(name)
        if t is None:
            continue
        parts = []
        met = lite is not None
        for kind in ("json", "sse"):
            rps = med(t, kind, "rps")
            anchor = ANCHORS[kind]
            part = f"{kind.upper()} {rps:.0f} req/s = {rps / anchor:.2f}x issue 37's {anchor:.0f}"
            met = met and rps >= 2 * anchor
            if lite is not None:
                other = med(lite, kind, "rps")
                wanted = 2 * anchor / LITELLM_ANCHORS[kind]
                part += f", {rps / other:.2f}x LiteLLM's {other:.0f} here (wanted >= {wanted:.2f}x)"
                met = met and rps / other >= wanted
            parts.append(part)
        seq = med(t, "seq", "cpu")
        parts.append(f"sequential CPU {seq:.2f} ms/request ({'<=' if seq <= 2 else '>'} 2 ms)")
        verdict_rps = "met" if met else ("not met" if lite is not None else "no LiteLLM in this run")
        lines.append(f"{name}: " + "; ".join(parts) + f"; >= 2x req/s: {verdict_rps}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="each measured load (per target, round)")
    parser.add_argument("--warmup", type=float, default=2.0, help="load before each measured one (uncounted)")
    parser.add_argument("--sequential", type=float, default=5.0, help="seconds of one-connection JSON calls")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settle", type=float, default=30.0, help="at most this long for background work")
    parser.add_argument("--litellm", default=None, help="LiteLLM's `litellm` command (litellm[proxy])")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: " + ", ".join(TARGETS))
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test", help="for memtap-pg-*")
    parser.add_argument(
        "--questions",
        choices=["rotate", "same", "new"],
        default="rotate",
        help="each call's question: the next of 16 (default), always one, or a new one each call",
    )
    parser.add_argument("--json", default=None, help="write every round's figures here")
    args = parser.parse_args()
    global QUESTION_MODE
    QUESTION_MODE = args.questions

    names = [n.strip() for n in args.targets.split(",") if n.strip()]
    unknown = set(names) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}")
    scripts: dict[str, Path] | None = None
    work = Path(tempfile.mkdtemp(prefix="memtap-proxy-vs-litellm-"))
    if shutil.which("wrk"):
        scripts = {mode: lua_script(work, mode, args.questions) for mode in ("json", "sse")}
    else:
        print(
            "WARNING: wrk not found (Debian/Ubuntu: apt-get install -y wrk). Falling back to an httpx "
            "load generator in this process: it shares the cores with the targets, so its req/s "
            "measure the generator as much as the target.",
            flush=True,
        )
    if "litellm" in names and not (args.litellm and Path(args.litellm).exists()):
        print(
            "LiteLLM skipped: pass --litellm PATH to its `litellm` command (install it in a venv of "
            "its own: python3 -m venv /work/venvs/litellm-proxy && "
            "/work/venvs/litellm-proxy/bin/pip install 'litellm[proxy]')",
            flush=True,
        )
        names.remove("litellm")

    up_port = free_port()
    up_log = (work / "upstream.log").open("wb")
    up = subprocess.Popen(
        [sys.executable, str(HERE.parent / "proxy.py"), "--serve-upstream", str(up_port)],
        stdout=up_log,
        stderr=subprocess.STDOUT,
    )
    upstream = f"http://127.0.0.1:{up_port}"
    targets: list[Target] = []
    finished = False
    try:
        direct = Target("direct", upstream, up)
        wait_ready(direct, 30)
        for name in names:
            if name == "direct":
                targets.append(direct)
            elif name == "litellm":
                targets.append(start_litellm(args.litellm, upstream, work))
            else:
                targets.append(start_memtap(name, upstream, work, args))
        for t in targets:
            wait_ready(t, 180)
            settle(t.pids(), args.settle)
        print(
            f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; generator "
            f"{'wrk' if scripts else 'httpx'}; {args.connections} connections / {args.threads} threads, "
            f"{args.seconds:.0f} s each after {args.warmup:.0f} s warm-up; {args.rounds} rounds",
            flush=True,
        )
        for r in range(args.rounds):
            order = targets[r % len(targets) :] + targets[: r % len(targets)]
            for t in order:
                for phase_name, mode, sequential in PHASES:
                    figures = phase(t, up.pid, phase_name, mode, sequential, args, scripts)
                    t.results.setdefault(phase_name, []).append(figures)
                    print(
                        f"round {r + 1} {t.name:20} {phase_name:4} {figures['rps']:8.1f} req/s  "
                        f"p50 {figures['p50']:7.2f} p99 {figures['p99']:7.2f} ms  server CPU "
                        f"{figures['cpu']:.2f} ms/req ({figures['cpu_load']:.2f} under load, "
                        f"{figures['tail_s']:.1f} s tail)  upstream {figures['upstream_cpu']:.2f}  "
                        f"gen {figures['gen_cpu']:.2f}  pg {figures['pg_cpu']:.2f}  cores: server "
                        f"{figures['server_cores']:.2f}, measured {figures['measured_cores']:.2f}, "
                        f"machine {figures['machine_cores']:.2f}  load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
                if r == 0 and t.name != "direct":
                    probe(t)
        finished = True
    finally:
        for t in targets:
            if t.name != "direct":
                stop(t)
            if not finished and t.store and t.store.startswith("postgresql"):
                drop_schema(t.store)  # a run that failed leaves no schema behind
        up.terminate()
        up.wait(10)
        up_log.close()

    for t in targets:
        if t.injected:
            print(f"{t.name}: {t.injected}")
        if t.store is None:
            continue
        stored = exchanges(t)
        ok = stored is not None and stored >= t.answered
        mark = "" if ok else "  <-- MISSING"
        print(f"{t.name}: {stored} exchanges stored for {t.answered} answered calls{mark}")
        if not ok:
            ERRORS.append(f"ERROR: {t.name} stored {stored} exchanges for {t.answered} answered calls")
        if t.store.startswith("postgresql"):
            drop_schema(t.store)
    print()
    print(table(targets))
    print()
    for line in verdict(targets):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({t.name: t.results for t in targets}, indent=1))
    if ERRORS:
        print("\n".join(["", "FAILED:", *ERRORS]), file=sys.stderr)
        raise SystemExit(1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
