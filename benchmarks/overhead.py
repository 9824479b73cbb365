"""Overhead of a memtap-registered openai client over the bare SDK, in one run.

Both clients talk to the same local scripted server; calls alternate (bare, registered,
registered, bare, ...) so that machine noise hits both alike. Reported: median per-call time
of each, the added median and the ratio, for non-streamed calls and for streams (time to the
first chunk and to the end). The registered client calls in one session, so once warm it
injects a full history budget (20 messages) on every call.

    python benchmarks/overhead.py [--calls 2000] [--store memory://] [--json]
    python benchmarks/overhead.py --body-kb 70 --new-session [--provider anthropic] [--calls 300]
    python benchmarks/overhead.py --matrix [--calls 300]   # 1/16/70 KB x session kinds x providers
    python benchmarks/overhead.py --only capture --calls 400 --json   # one scenario, for A/B rounds
    python benchmarks/overhead.py --server process --pin   # the server in its own process and CPU

Where the scripted server runs matters on a small machine. In a thread of this process
(``--server thread``, the default) it shares the GIL, and the cores, with the app and
memtap's background threads: work memtap does off the request path (formatting a finished
call, the record of what it injected, the store's writes) then slows the server's answer
too. A provider is elsewhere: ``--server process`` runs the server in a child process, and
``--pin`` (Linux) gives it the last CPU and this process the others, as when the model
runs on another machine.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai

import memtap
from memtap.testing.server import ScriptedModelServer

CITIES = ["Japan", "France", "Peru", "Kenya", "Norway", "Chile", "Egypt", "Canada", "India", "Spain"]
_questions = itertools.count()


def messages() -> list[dict[str, str]]:
    """The next user turn: each call asks something new, as in a real conversation (a
    session of one repeated question would be one turn the request always carries)."""
    n = next(_questions)
    return [{"role": "user", "content": f"Question {n}: what is the capital of {CITIES[n % 10]}?"}]


def call_json(client: openai.OpenAI) -> tuple[float, float]:
    started = time.perf_counter()
    client.chat.completions.create(model="bench", messages=messages())
    elapsed = time.perf_counter() - started
    return elapsed, elapsed


def call_stream(client: openai.OpenAI) -> tuple[float, float]:
    started = time.perf_counter()
    stream = client.chat.completions.create(model="bench", messages=messages(), stream=True)
    first = None
    for _chunk in stream:
        if first is None:
            first = time.perf_counter() - started
    return first or 0.0, time.perf_counter() - started


def measure(
    bare: Any,
    tapped: Any,
    call: Callable[[Any], tuple[float, float]],
    calls: int,
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"bare_first": [], "bare_total": [], "tapped_first": [], "tapped_total": []}
    for _ in range(50):
        call(bare)
        call(tapped)
    for i in range(calls):
        order = (("bare", bare), ("tapped", tapped)) if i % 2 == 0 else (("tapped", tapped), ("bare", bare))
        for name, client in order:
            first, total = call(client)
            out[f"{name}_first"].append(first * 1e3)
            out[f"{name}_total"].append(total * 1e3)
    return out


def summarise(label: str, bare: list[float], tapped: list[float]) -> dict[str, float | str]:
    b, t = statistics.median(bare), statistics.median(tapped)
    return {"scenario": label, "bare_ms": b, "memtap_ms": t, "added_ms": t - b, "ratio": t / b}


class ServerURLs:
    """Where a scripted server answers (what the benchmarks read of one)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.openai_base_url = base_url + "/v1"
        self.anthropic_base_url = base_url


#: What the child process of ``--server process`` runs: the scripted server (on the CPU its
#: argument names, if any), its URL printed, until its standard input closes.
_SERVE = """
import os, sys
if len(sys.argv) > 1:
    os.sched_setaffinity(0, {int(sys.argv[1])})
from memtap.testing.server import ScriptedModelServer
with ScriptedModelServer() as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
"""

#: Where the server runs (``--server``) and whether it gets a CPU of its own (``--pin``).
SERVER = {"where": "thread", "pin": False}


@contextlib.contextmanager
def model_server() -> Iterator[ServerURLs]:
    """The scripted model server, where :data:`SERVER` says: a thread of this process, or a
    child process (pinned: the last CPU for it, the others for this process)."""
    if SERVER["where"] == "thread":
        with ScriptedModelServer() as server:
            yield ServerURLs(server.base_url)
        return
    cpus = sorted(os.sched_getaffinity(0)) if SERVER["pin"] else []
    if SERVER["pin"] and len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    command = [sys.executable, "-c", _SERVE, *([str(cpus[-1])] if cpus else [])]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    url = child.stdout.readline().strip()
    if not url:
        child.wait(timeout=10)
        raise SystemExit(f"the scripted server's process did not start (exit status {child.returncode})")
    if cpus:
        os.sched_setaffinity(0, cpus[:-1])
    try:
        yield ServerURLs(url)
    finally:
        if cpus:
            os.sched_setaffinity(0, cpus)
        child.stdin.close()
        child.wait(timeout=10)


#: Long-term memory switched off: what issue 2 measures (capture + history injection).
NO_LONGTERM = {"embedder": False, "episodes": False, "recall": memtap.RecallBudget(k=0)}


def run(
    calls: int, store: str, history_messages: int, longterm: bool = False
) -> list[dict[str, float | str]]:
    results = []
    budget = memtap.HistoryBudget(max_messages=history_messages, max_tokens=100_000)
    options: dict[str, object] = {} if longterm else dict(NO_LONGTERM)
    with model_server() as server:
        mem = memtap.Memory(store, history=budget, **options)  # type: ignore[arg-type]
        bare = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        tapped = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        )
        label = f"history {history_messages} msgs" if history_messages else "capture only"
        if longterm:
            label += " + defaults (episodes, recall)"
        with mem.scope(entity_id="bench", session_id=f"bench-{history_messages}"):
            json_times = measure(bare, tapped, call_json, calls)
            stream_times = measure(bare, tapped, call_stream, calls // 2)
        results.append(summarise(f"json, {label}", json_times["bare_total"], json_times["tapped_total"]))
        results.append(
            summarise(
                f"stream first chunk, {label}", stream_times["bare_first"], stream_times["tapped_first"]
            )
        )
        results.append(
            summarise(f"stream total, {label}", stream_times["bare_total"], stream_times["tapped_total"])
        )
        mem.flush()
        mem.close()
    return results


#: Words of a long agent system prompt (what agents built on the SDKs send every call).
_AGENT_WORDS = (
    "task-notification risk-first review the repository before editing; prefer small diffs; "
    "run the tests; never commit secrets; explain each change; tools: read_file, write_file, "
    "search, run_command; when a task-notification arrives, reply with a risk-first summary; "
    "keep the user informed; ask before destructive operations; follow the style guide. "
)


def agent_prompt(kb: int) -> str:
    """A system prompt of about ``kb`` kilobytes of agent-like text."""
    lines = []
    size = 0
    i = 0
    while size < kb * 1024:
        line = f"{i:05d} {_AGENT_WORDS}"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)


def _openai_clients(mem: memtap.Memory, server: ServerURLs) -> tuple[Any, Any]:
    def make() -> openai.OpenAI:
        return openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)

    return make(), mem.register(make())


def _anthropic_clients(mem: memtap.Memory, server: ServerURLs) -> tuple[Any, Any]:
    import anthropic  # only for --provider anthropic

    def make() -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="sk-ant-bench", max_retries=0)

    return make(), mem.register(make())


def run_body(
    calls: int, store: str, body_kb: int, *, new_session: bool, provider: str = "openai"
) -> list[dict[str, float | str]]:
    """A registered client with Memory's defaults, a ``body_kb`` KB system prompt and one
    user message per call, a new session every call (``new_session``) or one growing
    session, interleaved with a bare client (issue 15's "as a new user would")."""
    prompt = agent_prompt(body_kb)
    sessions = itertools.count()

    def call(client: Any) -> tuple[float, float]:
        question = messages()[0]["content"]  # a new question each call, as in a conversation
        started = time.perf_counter()
        if provider == "anthropic":
            client.messages.create(
                model="bench", max_tokens=64, system=prompt, messages=[{"role": "user", "content": question}]
            )
        else:
            client.chat.completions.create(
                model="bench",
                messages=[{"role": "system", "content": prompt}, {"role": "user", "content": question}],
            )
        elapsed = time.perf_counter() - started
        return elapsed, elapsed

    with model_server() as server:
        mem = memtap.Memory(store)
        bare, tapped = (_anthropic_clients if provider == "anthropic" else _openai_clients)(mem, server)

        def tapped_call(client: Any) -> tuple[float, float]:
            session = f"bench-new-{next(sessions)}" if new_session else "bench-one"
            with mem.scope(entity_id="bench", session_id=session):
                return call(client)

        times = measure_pair(bare, tapped, call, tapped_call, calls)
        mem.flush()
        mem.close()
    mode = "new session every call" if new_session else "one session"
    return [summarise(f"{provider} {body_kb} KB, {mode}", times["bare_total"], times["tapped_total"])]


def measure_pair(
    bare: Any,
    tapped: Any,
    bare_call: Callable[[Any], tuple[float, float]],
    tapped_call: Callable[[Any], tuple[float, float]],
    calls: int,
) -> dict[str, list[float]]:
    """Like :func:`measure`, with a different call function for each client."""
    return measure(bare, tapped, lambda c: (tapped_call if c is tapped else bare_call)(c), calls)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000, help="calls per client per scenario")
    parser.add_argument("--store", default=None, help="store URL (default: a temporary DuckDB file)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="also measure Memory's defaults (episodic memory, recall with the installed embedder)",
    )
    parser.add_argument(
        "--body-kb",
        type=int,
        default=0,
        help="measure only calls with a system prompt of this many KB (Memory's defaults)",
    )
    parser.add_argument("--new-session", action="store_true", help="with --body-kb: a new session every call")
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="bodies of 1, 16 and 70 KB x new session / one session x openai / anthropic (defaults)",
    )
    parser.add_argument(
        "--provider", choices=["openai", "anthropic"], default="openai", help="with --body-kb"
    )
    parser.add_argument(
        "--only",
        choices=["capture", "history"],
        default=None,
        help="only capture (no history) or only history 20 msgs: short runs to alternate source trees",
    )
    parser.add_argument(
        "--server",
        choices=["thread", "process"],
        default="thread",
        help="where the scripted server runs: a thread of this process, or a process of its own",
    )
    parser.add_argument(
        "--pin", action="store_true", help="with --server process: the server on a CPU of its own (Linux)"
    )
    args = parser.parse_args()
    if args.pin and args.server != "process":
        parser.error("--pin goes with --server process")
    SERVER.update(where=args.server, pin=args.pin)
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or f"duckdb:///{Path(tmp) / 'bench.duckdb'}"
        if args.matrix:
            rows = []
            for provider, kb, new_session in itertools.product(
                ["openai", "anthropic"], [1, 16, 70], [True, False]
            ):
                url = args.store or f"duckdb:///{Path(tmp) / f'bench-{provider}-{kb}-{new_session}.duckdb'}"
                rows += run_body(args.calls, url, kb, new_session=new_session, provider=provider)
        elif args.body_kb:
            rows = run_body(
                args.calls, store, args.body_kb, new_session=args.new_session, provider=args.provider
            )
        elif args.only:
            rows = run(args.calls, store, 0 if args.only == "capture" else 20)
        else:
            rows = run(args.calls, store, 0) + run(args.calls, store, 20)
            if args.defaults:
                rows += run(args.calls, store, 20, longterm=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        return
    where = f"server in a {args.server}" + (", pinned to a CPU of its own" if args.pin else "")
    store_name = args.store or "duckdb (temporary file)"
    print(f"store: {store_name}; {args.calls} calls per client, interleaved; {where}")
    print(f"{'scenario':44} {'bare ms':>9} {'memtap ms':>10} {'added ms':>9} {'ratio':>7}")
    for r in rows:
        cells = f"{r['bare_ms']:9.3f} {r['memtap_ms']:10.3f} {r['added_ms']:9.3f} {r['ratio']:7.3f}"
        print(f"{r['scenario']:44} {cells}")


if __name__ == "__main__":
    main()
