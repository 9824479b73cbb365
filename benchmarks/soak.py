"""Sustained load: does what memtap adds to a call stay constant as the work done grows?

N calls (default 5,000) back to back through a registered openai client with memtap's
defaults (a DuckDB file, the spool, history, episodes, MiniLM recall), each alternated with
the same call through a bare client against the same local scripted server, so that
machine noise hits both alike. Ten entities, sessions of 20 calls, and a new user turn on
every call that says something worth remembering (so every exchange makes episodes, as in a
real conversation). Printed per window of 500 registered calls: the added median (registered
minus bare, ms) and the ratio, the added 90th percentile, the calling thread's CPU added (the
median of ``time.thread_time`` per registered call minus per bare one: the request path's own
work, apart from waits for the GIL or a busy core), the process CPU per call pair, the
resident memory, how many stored facts still wait for a vector, and what the full model did
for documents so far (texts embedded, vectors reused). At the end: ``Memory.flush()`` (timed),
then up to 10 s more for the embedding (the texts the model embedded then), and the facts
still without a vector after it.

    python benchmarks/soak.py [--calls 5000] [--window 500] [--server thread|process] [--json]
    python benchmarks/soak.py --memory off    # the same run with both clients bare: the CPU baseline
    python benchmarks/soak.py --warm          # the embedder loaded before the first call

Background CPU per captured exchange (issue 37) is this run's process CPU minus the same
run's with ``--memory off``, divided by the calls; with ``--server process`` the model
server's CPU is not in the process's, so the difference is memtap's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import openai
import overhead
from overhead import SERVER, model_server

import memtap
from memtap import RecallBudget

ENTITIES = 10
SESSION_CALLS = 20
#: What users say: a statement worth remembering and a question (a question alone makes no
#: episode), different on every call.
THINGS = ["bike", "kettle", "garden", "violin", "novel", "camera", "tent", "laptop", "sofa", "piano"]
PLACES = ["Lisbon", "Osaka", "Quito", "Accra", "Bergen", "Hobart", "Tartu", "Cusco", "Lyon", "Pune"]


def user_turn(n: int) -> str:
    """The ``n``-th call's user turn: a new fact and a question."""
    thing, place = THINGS[n % 10], PLACES[(n // 10) % 10]
    price = n % 97 + 3
    return f"Note {n}: I bought a {thing} in {place} last week for {price} euros. Was that a fair price?"


def resident_mb() -> float:
    """The process's resident memory now (Linux), in MB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def vectors_pending(mem: memtap.Memory) -> tuple[int, int]:
    """(facts stored, facts without a vector of the default embedder), over the soak's entities."""
    engine = mem.longterm.engine
    model = engine.embedder.name if engine.embedder is not None else None
    reader = getattr(mem.store, "indexable_facts", None)
    if reader is None or model is None:
        return 0, 0
    total = missing = 0
    for e in range(ENTITIES):
        for _fact, vector in reader(entity_id=f"soak-e{e}", model=model):
            total += 1
            missing += vector is None
    return total, missing


def findable(mem: memtap.Memory, entities: Iterable[str]) -> tuple[int, int, int]:
    """(facts indexed, of which without any vector, of which with only the quick one) over
    the loaded indexes of ``entities``: what recall can find by meaning right now."""
    indexed = blind = quick = 0
    for entity_id in entities:
        entry = mem.longterm.engine.indexes.get(entity_id, wait=False)
        index = entry.index if entry is not None else None
        if index is not None:
            indexed += len(index)
            blind += len(index) - index.vector_count
            quick += index.vector_count - index.full_count
    return indexed, blind, quick


SOAK_ENTITIES = [f"soak-e{e}" for e in range(ENTITIES)]

#: ``--answers own``: the scripted server answers each call in words of its own (a real
#: answer, not a restatement of the turn, so it is embedded for itself), patched into the
#: server wherever it runs.
OWN_ANSWERS = """
import re
from memtap.testing.server import Reply, ScriptedModelServer

def _own_answer(self, user_text):
    found = re.search(r"Note (\\d+)", user_text())
    n = found.group(1) if found else "0"
    return Reply(text=f"That sounds reasonable to me; keep receipt {n} somewhere safe in case it breaks.")

ScriptedModelServer._next_reply = _own_answer
"""


def answer_in_own_words() -> None:
    """Make the scripted server, in this process or its child, answer in words of its own."""
    exec(OWN_ANSWERS, {})
    overhead._SERVE = OWN_ANSWERS + overhead._SERVE


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, summed by name (a pool's threads,
    named ``name_0``, ``name_1``..., under ``name``)."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ValueError):  # ended meanwhile
            continue
        name = re.sub(r"_\d+$", "", thread.name)
        out[name] = out.get(name, 0.0) + seconds
    return out


def run(
    calls: int, window: int, memory_on: bool, model_wait: float | None = None, warm: bool = False
) -> dict[str, Any]:
    home = tempfile.TemporaryDirectory()
    os.environ["MEMTAP_HOME"] = home.name
    windows: list[dict[str, Any]] = []
    with model_server() as server:
        budget = RecallBudget() if model_wait is None else RecallBudget(model_wait=model_wait)
        mem = memtap.Memory(f"duckdb:///{Path(home.name) / 'soak.duckdb'}", recall=budget)

        def client() -> openai.OpenAI:
            return openai.OpenAI(base_url=server.openai_base_url, api_key="sk-soak", max_retries=0)

        bare = client()
        tapped = mem.register(client()) if memory_on else client()
        queries = mem.longterm.engine.queries
        if warm and memory_on and queries is not None:
            queries.warm_up(wait=True, timeout=120)  # the model and its quick table
        bare_ms: list[float] = []
        tapped_ms: list[float] = []
        # The calling thread's CPU per call (time.thread_time): what a call costs this
        # thread, apart from its waits (the server, the GIL, a busy core).
        bare_cpu: list[float] = []
        tapped_cpu: list[float] = []
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        counting = 0.0
        for i in range(calls):
            messages = [{"role": "user", "content": user_turn(i)}]
            entity = i % ENTITIES
            session = i // (ENTITIES * SESSION_CALLS)
            pair = [("bare", bare), ("tapped", tapped)]
            if i % 2:
                pair.reverse()
            for name, c in pair:
                with mem.scope(entity_id=f"soak-e{entity}", session_id=f"soak-e{entity}-s{session}"):
                    started, thread_started = time.perf_counter(), time.thread_time()
                    c.chat.completions.create(model="soak", messages=messages)
                    wall_ms = (time.perf_counter() - started) * 1e3
                    cpu_ms = (time.thread_time() - thread_started) * 1e3
                    (bare_ms if name == "bare" else tapped_ms).append(wall_ms)
                    (bare_cpu if name == "bare" else tapped_cpu).append(cpu_ms)
            if (i + 1) % window == 0:
                cpu = time.process_time() - counting
                counting_started = time.thread_time()
                b, t = statistics.median(bare_ms), statistics.median(tapped_ms)
                b90, t90 = p90(bare_ms), p90(tapped_ms)
                stored, missing = vectors_pending(mem) if memory_on else (0, 0)
                _, blind, _ = findable(mem, SOAK_ENTITIES) if memory_on else (0, 0, 0)
                stats = mem.longterm.engine.stats
                windows.append(
                    {
                        "calls": i + 1,
                        "bare_ms": b,
                        "memtap_ms": t,
                        "added_ms": t - b,
                        "bare_p90_ms": b90,
                        "memtap_p90_ms": t90,
                        "added_p90_ms": t90 - b90,
                        "ratio": t / b,
                        "bare_thread_cpu_ms": statistics.median(bare_cpu),
                        "added_thread_cpu_ms": statistics.median(tapped_cpu) - statistics.median(bare_cpu),
                        "cpu_ms_per_pair": (cpu - cpu_start) * 1e3 / window,
                        "rss_mb": resident_mb(),
                        "facts": stored,
                        "vectors_pending": missing,
                        "without_any_vector": blind,
                        "escalations": stats.escalations,
                        "model_deferred": stats.model_deferred,
                        "texts_embedded": stats.facts_embedded,
                        "vectors_reused": stats.vectors_reused,
                    }
                )
                print(_row(windows[-1]), flush=True)
                for values in (bare_ms, tapped_ms, bare_cpu, tapped_cpu):
                    values.clear()
                cpu_start = cpu
                # Reading every fact back to count the pending vectors is the benchmark's
                # own work (~1 s of this thread at 10,000 facts): not counted in the next
                # window's CPU per pair.
                counting += time.thread_time() - counting_started
        flushed_at = time.perf_counter()
        mem.flush(60)
        memorized_at = time.perf_counter()
        embedded_before = mem.longterm.engine.stats.facts_embedded
        # Embedding is not part of Memory.flush (vectors are derived data): given 10 s more.
        mem.longterm.engine.flush(10)
        flush_s = time.perf_counter() - flushed_at
        embedded_in_flush = mem.longterm.engine.stats.facts_embedded - embedded_before
        cpu_total = time.process_time() - counting  # the process's, not the counting's
        stored, missing = vectors_pending(mem) if memory_on else (0, 0)
        _, blind, _ = findable(mem, SOAK_ENTITIES) if memory_on else (0, 0, 0)
        threads = thread_cpu()
        texts_embedded = mem.longterm.engine.stats.facts_embedded
        mem.close()
    return {
        "memory": "on" if memory_on else "off",
        "calls": calls,
        "server": SERVER["where"],
        "windows": windows,
        "wall_s": time.perf_counter() - wall_start,
        "cpu_s": cpu_total,
        "counting_cpu_s": counting,
        "flush_s": flush_s,
        "memorize_flush_s": memorized_at - flushed_at,
        "texts_embedded_in_flush": embedded_in_flush,
        "facts": stored,
        "vectors_pending_after_flush": missing,
        "without_any_vector_after_flush": blind,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
        "thread_cpu_s": threads,
        "texts_embedded": texts_embedded,
    }


def p90(values: list[float]) -> float:
    """The 90th percentile of ``values``: the tail a median does not show (a call that
    waits for the GIL behind a background thread waits up to its 5 ms switch interval)."""
    return statistics.quantiles(values, n=10)[-1]


def _row(w: dict[str, Any]) -> str:
    return (
        f"{w['calls']:6d} calls: added {w['added_ms']:+7.3f} ms (x{w['ratio']:.2f}, "
        f"bare {w['bare_ms']:.2f}; p90 added {w['added_p90_ms']:+.3f}; calling thread's CPU "
        f"added {w['added_thread_cpu_ms']:+.3f}), "
        f"CPU {w['cpu_ms_per_pair']:.2f} ms/pair, RSS {w['rss_mb']:.0f} MB, "
        f"{w['vectors_pending']}/{w['facts']} facts without the full model's vector "
        f"({w['without_any_vector']} without any), {w['escalations']} escalations "
        f"({w['model_deferred']} not waited for); full model so far: {w['texts_embedded']} texts "
        f"embedded, {w['vectors_reused']} vectors reused"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--memory", choices=["on", "off"], default="on")
    parser.add_argument("--server", choices=["thread", "process"], default="thread")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--answers",
        choices=["echo", "own"],
        default="echo",
        help="the server's answers: 'You said: <turn>' (default) or words of its own",
    )
    parser.add_argument(
        "--model-wait", type=float, default=None, help="RecallBudget.model_wait (default: as shipped)"
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="load the embedder (model and quick table) before the first call: the steady "
        "state, without the start's transient (recall by words until the model is there)",
    )
    args = parser.parse_args()
    SERVER["where"] = args.server
    if args.answers == "own":
        answer_in_own_words()
    result = run(args.calls, args.window, args.memory == "on", args.model_wait, args.warm)
    first, last = result["windows"][0], result["windows"][-1]
    print(
        f"first window {first['added_ms']:+.3f} ms, last {last['added_ms']:+.3f} ms "
        f"(drift {last['added_ms'] - first['added_ms']:+.3f} ms); worst window "
        f"{max(w['added_ms'] for w in result['windows']):+.3f} ms; process CPU {result['cpu_s']:.1f} s "
        f"(the benchmark's counting of pending vectors left out: {result['counting_cpu_s']:.1f} s); "
        f"flush {result['flush_s']:.1f} s (memorize {result['memorize_flush_s']:.1f} s; then the model "
        f"embedded {result['texts_embedded_in_flush']} texts), "
        f"then {result['vectors_pending_after_flush']}/{result['facts']} "
        f"facts without the full model's vector ({result['without_any_vector_after_flush']} without any); "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    threads = result["thread_cpu_s"]
    model = sum(v for k, v in threads.items() if k.startswith(("memtap-embed", "memtap-query")))
    print(
        "thread CPU (s, flush included): "
        + ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(threads.items(), key=lambda t: -t[1]))
    )
    if result["texts_embedded"]:
        print(
            f"the model's threads (memtap-embed*, memtap-query*): {model:.1f} s for "
            f"{result['texts_embedded']} texts embedded, "
            f"{model * 1e3 / result['texts_embedded']:.2f} ms a text"
        )
    if args.json:
        json.dump(result, sys.stdout, indent=2)


if __name__ == "__main__":
    main()
