"""Overhead of a memtap-registered openai client over the bare SDK, in one run.

Both clients talk to the same local scripted server; calls alternate (bare, registered,
registered, bare, ...) so that machine noise hits both alike. Reported: median per-call time
of each, the added median and the ratio, for non-streamed calls and for streams (time to the
first chunk and to the end). The registered client calls in one session, so once warm it
injects a full history budget (20 messages) on every call.

    python benchmarks/overhead.py [--calls 2000] [--store memory://] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import openai

import memtap
from memtap.testing.server import ScriptedModelServer

MESSAGES = [{"role": "user", "content": "What is the capital of Japan? Answer in one word."}]


def call_json(client: openai.OpenAI) -> tuple[float, float]:
    started = time.perf_counter()
    client.chat.completions.create(model="bench", messages=MESSAGES)
    elapsed = time.perf_counter() - started
    return elapsed, elapsed


def call_stream(client: openai.OpenAI) -> tuple[float, float]:
    started = time.perf_counter()
    stream = client.chat.completions.create(model="bench", messages=MESSAGES, stream=True)
    first = None
    for _chunk in stream:
        if first is None:
            first = time.perf_counter() - started
    return first or 0.0, time.perf_counter() - started


def measure(
    bare: openai.OpenAI,
    tapped: openai.OpenAI,
    call: Callable[[openai.OpenAI], tuple[float, float]],
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


#: Long-term memory switched off: what issue 2 measures (capture + history injection).
NO_LONGTERM = {"embedder": False, "episodes": False, "recall": memtap.RecallBudget(k=0)}


def run(
    calls: int, store: str, history_messages: int, longterm: bool = False
) -> list[dict[str, float | str]]:
    results = []
    budget = memtap.HistoryBudget(max_messages=history_messages, max_tokens=100_000)
    options: dict[str, object] = {} if longterm else dict(NO_LONGTERM)
    with ScriptedModelServer() as server:
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or f"duckdb:///{Path(tmp) / 'bench.duckdb'}"
        rows = run(args.calls, store, 0) + run(args.calls, store, 20)
        if args.defaults:
            rows += run(args.calls, store, 20, longterm=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        return
    print(f"store: {args.store or 'duckdb (temporary file)'}; {args.calls} calls per client, interleaved")
    print(f"{'scenario':40} {'bare ms':>9} {'memtap ms':>10} {'added ms':>9} {'ratio':>7}")
    for r in rows:
        cells = f"{r['bare_ms']:9.3f} {r['memtap_ms']:10.3f} {r['added_ms']:9.3f} {r['ratio']:7.3f}"
        print(f"{r['scenario']:40} {cells}")


if __name__ == "__main__":
    main()
