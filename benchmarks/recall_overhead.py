"""What recall adds to a registered openai client's call: 10k facts for the entity, a new
question on every call (no query-cache hits), bare and registered clients interleaved
against the local scripted server, medians.

Scenarios: recall with the MiniLM embedder (hybrid: the query's vector is made on the
request path, from the quick static table by default, or by the full model with
``minilm-full``), recall with BM25 only (``embedder=False``), and capture only (no history, no recall)
as the baseline of memtap's own cost. Facts are synthetic (see ``recall_scaling.py``); one per
question asked holds the question's words, so that recall takes the quick path (a question in
other words than the facts costs what the full-model row measures).

    python benchmarks/recall_overhead.py [--calls 1000] [--facts 10000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import openai
from recall_scaling import SyntheticStore, question

import memtap
from memtap.history.injector import HistoryBudget
from memtap.longterm.recall_injector import RecallBudget
from memtap.testing.server import ScriptedModelServer

QUESTIONS = [
    "what did I tell you about my dog",
    "where do I work these days",
    "which city did we visit last summer",
    "what food does my sister like",
]


def asked(i: int) -> str:
    """The question of call ``i`` (a new one every call: no query-cache hits)."""
    return f"{QUESTIONS[i % len(QUESTIONS)]} {question(i).split()[-1]}"


def measure(bare: Any, tapped: Any, calls: int, mem: memtap.Memory) -> tuple[float, float, int]:
    b: list[float] = []
    t: list[float] = []
    injected = 0
    for i in range(calls + 50):
        messages = [{"role": "user", "content": asked(i)}]
        order = ((b, bare), (t, tapped)) if i % 2 == 0 else ((t, tapped), (b, bare))
        for out, client in order:
            started = time.perf_counter()
            client.chat.completions.create(model="bench", messages=messages)
            if i >= 50:
                out.append(time.perf_counter() - started)
    injected = mem.longterm.engine.stats.searches
    return statistics.median(b) * 1e3, statistics.median(t) * 1e3, injected


def scenario(
    server: ScriptedModelServer, facts: int, calls: int, embedder: Any, recall: bool
) -> dict[str, Any]:
    name = embedder.name if embedder is not None else "none"
    store = SyntheticStore({"bench": facts}, name, [asked(i) for i in range(calls + 50)])
    mem = memtap.Memory(
        store,
        entry_points=False,
        plugins=[__import__("memtap_openai")],
        embedder=embedder if embedder is not None else False,
        history=HistoryBudget(max_messages=0),
        recall=RecallBudget(k=6 if recall else 0),
        episodes=False,
        spool=False,
    )
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
    tapped = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0))
    mem.recall("warm", entity_id="bench")
    with mem.scope(entity_id="bench", session_id="bench"):
        b, t, searches = measure(bare, tapped, calls, mem)
    stats = mem.longterm.engine.stats
    mem.close()
    return {
        "bare_ms": b,
        "memtap_ms": t,
        "added_ms": t - b,
        "searches": searches,
        "lexical_only": stats.lexical_only,
        "embed_timeouts": stats.embed_timeouts,
        "escalations": stats.escalations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--facts", type=int, default=10_000)
    args = parser.parse_args()
    probe = memtap.Memory("memory://", spool=False)
    minilm = probe.longterm.engine.embedder
    probe.close()
    if minilm is not None and hasattr(minilm, "load"):
        minilm.load()
    rows = []
    with ScriptedModelServer() as server:
        rows.append(("capture only", scenario(server, args.facts, args.calls, None, recall=False)))
        rows.append(
            (f"recall BM25 only, {args.facts} facts", scenario(server, args.facts, args.calls, None, True))
        )
        if minilm is not None:
            if hasattr(minilm, "prepare_quick_queries"):
                minilm.prepare_quick_queries()
            label = f"recall hybrid (MiniLM quick query), {args.facts} facts"
            rows.append((label, scenario(server, args.facts, args.calls, minilm, recall=True)))
            if hasattr(minilm, "quick_queries"):
                full = type(minilm)(quick_queries=False)
                full.load()
                label = f"recall hybrid (MiniLM full query), {args.facts} facts"
                rows.append((label, scenario(server, args.facts, args.calls, full, recall=True)))
    print(f"{args.calls} calls per client, interleaved; medians")
    print(
        f"{'scenario':50} {'bare ms':>8} {'memtap ms':>10} {'added ms':>9} "
        f"{'lexical-only':>13} {'escalated':>11}"
    )
    for label, r in rows:
        print(
            f"{label:50} {r['bare_ms']:8.3f} {r['memtap_ms']:10.3f} {r['added_ms']:9.3f} "
            f"{r['lexical_only']:>7d}/{r['searches']} {r['escalations']:>11d}"
        )


if __name__ == "__main__":
    main()
