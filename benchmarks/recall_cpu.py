"""Where recall's request-path CPU goes, part by part, on a store the soak's calls built.

``--calls`` calls (default 1,500) as ``benchmarks/soak.py`` makes them (ten entities,
sessions of 20, a new statement on every call) fill a DuckDB store; once every vector is
made, ``--ask`` more calls (default 400) are timed: the calling thread's CPU
(``time.thread_time``, so waits and other threads do not count) in the recall injector's
hook and in the functions of the search it calls, each wrapped while the timed calls run.
Parts nest (the search is inside the injection; the index search inside the search).
``model_wait`` is 0: no call waits for the full model, as under sustained load.

    python benchmarks/recall_cpu.py [--calls 1500] [--ask 400]

The wrappers cost ~1 µs a call; figures on a shared host move by 10-30% between runs: take
two runs a side to compare a change.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
from soak import ENTITIES, SESSION_CALLS, user_turn

import memtap
from memtap import RecallBudget
from memtap.longterm import index as index_module
from memtap.longterm import recall as recall_module
from memtap.longterm import recall_injector
from memtap.testing.server import ScriptedModelServer

#: (owner, attribute, label): what is timed; the label's indent shows what it is inside.
PARTS: list[tuple[Any, str, str]] = [
    (recall_module.RecallEngine, "search", "  search"),
    (recall_module, "query_window", "    the question's time"),
    (recall_module.QueryVectors, "quick", "    quick vector"),
    (recall_module, "term_counts", "    terms"),
    (recall_module.RecallEngine, "_words_carry", "    words carry?"),
    (index_module.EntityIndex, "search", "    index search"),
    (index_module.EntityIndex, "_lexical", "      BM25"),
    (index_module.EntityIndex, "_exact_cosines", "      cosines"),
    (index_module.EntityIndex, "_reorder", "      reorder"),
    (recall_injector.RecallPlugin, "_carried", "  what the history carries"),
    (recall_injector, "can_answer", "  answer checks"),
    (recall_injector, "fact_line", "  lines"),
]


class Meter:
    """Thread CPU per label, counted while :attr:`on`."""

    def __init__(self) -> None:
        self.on = False
        self.seconds: collections.Counter[str] = collections.Counter()

    def timed(self, function: Callable[..., Any], label: str) -> Callable[..., Any]:
        """``function``, counting its thread CPU under ``label`` while the meter is on."""

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return function(*args, **kwargs)
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += time.thread_time() - started

        return wrapper

    def wrap(self, owner: Any, name: str, label: str) -> None:
        """Time ``owner.name`` (a function, method or static method) under ``label``."""
        raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        static = isinstance(raw, staticmethod)
        wrapped = self.timed(raw.__func__ if static else raw, label)
        setattr(owner, name, staticmethod(wrapped) if static else wrapped)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1500, help="calls that build the store")
    parser.add_argument("--ask", type=int, default=400, help="calls timed afterwards")
    args = parser.parse_args()
    meter = Meter()
    with tempfile.TemporaryDirectory() as home, ScriptedModelServer() as server:
        os.environ["MEMTAP_HOME"] = home
        mem = memtap.Memory(f"duckdb:///{Path(home) / 'recall.duckdb'}", recall=RecallBudget(model_wait=0))
        client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-recall", max_retries=0)
        )

        def call(n: int) -> None:
            entity = n % ENTITIES
            with mem.scope(
                entity_id=f"soak-e{entity}", session_id=f"soak-e{entity}-s{n // (ENTITIES * SESSION_CALLS)}"
            ):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": user_turn(n)}]
                )

        for n in range(args.calls):
            call(n)
        mem.flush(60)
        mem.longterm.engine.flush(120)
        plugin = next(p for p in mem.pm.get_plugins() if isinstance(p, recall_injector.RecallPlugin))
        for impl in mem.pm.hook.memtap_request_injections.get_hookimpls():
            if impl.plugin is plugin:
                impl.function = meter.timed(impl.function, "recall injection")
        for owner, name, label in PARTS:
            meter.wrap(owner, name, label)
        meter.on = True
        for n in range(args.calls, args.calls + args.ask):
            call(n)
        meter.on = False
        mem.close()
    print(f"thread CPU per call, {args.ask} calls after {args.calls} (ms):")
    for label in ["recall injection", *(label for _, _, label in PARTS)]:
        print(f"  {label:34s} {meter.seconds[label] * 1e3 / args.ask:7.3f}")


if __name__ == "__main__":
    main()
