"""Where recall's request-path CPU goes, part by part, on a store the soak's calls built.

``--calls`` calls (default 1,500) as ``benchmarks/soak.py`` makes them (ten entities,
sessions of 20, a new statement on every call) fill a DuckDB store; once every vector is
made, ``--ask`` more calls (default 400) are timed: the calling thread's CPU
(``time.thread_time``, so waits and other threads do not count) in the recall injector's
hook and in the functions of the search it calls, each wrapped while the timed calls run.
Parts nest (the search is inside the injection; the index search inside the search).
``model_wait`` is 0: no call waits for the full model, as under sustained load.

    python benchmarks/recall_cpu.py [--calls 1500] [--ask 400] [--try TARGET=VALUE]

The wrappers cost ~1 µs a call; figures on a shared host move by 10-30% between runs, and
of two runs in turn the second is often the faster (docs/benchmarks.md, "Why a step costs
more in a call than in a loop"). To compare a setting, ``--try`` runs both sides in one
process: each timed call draws, at random, whether it runs as shipped or with ``TARGET`` (an
attribute, ``module:Class.NAME`` or ``module:NAME``) set to ``VALUE`` (a Python literal),
and each part is printed for both, per call of that side::

    python benchmarks/recall_cpu.py --try memtap.longterm.index:EntityIndex.SKETCH_FROM=512
"""

from __future__ import annotations

import argparse
import ast
import collections
import functools
import importlib
import os
import random
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
    """Thread CPU per label and side (``shipped`` or ``tried``: :attr:`side`), counted
    while :attr:`on`."""

    def __init__(self) -> None:
        self.on = False
        self.side = "shipped"
        self.seconds: collections.Counter[tuple[str, str]] = collections.Counter()

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
                self.seconds[self.side, label] += time.thread_time() - started

        return wrapper

    def wrap(self, owner: Any, name: str, label: str) -> None:
        """Time ``owner.name`` (a function, method or static method) under ``label``."""
        raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        static = isinstance(raw, staticmethod)
        wrapped = self.timed(raw.__func__ if static else raw, label)
        setattr(owner, name, staticmethod(wrapped) if static else wrapped)


class Setting:
    """An attribute ``--try`` sets for some calls: ``module:Class.NAME=VALUE`` or
    ``module:NAME=VALUE``."""

    def __init__(self, spec: str) -> None:
        target, _, value = spec.partition("=")
        module, _, path = target.partition(":")
        if not value or not path:
            raise SystemExit(f"--try {spec!r}: write it as module:Class.NAME=VALUE")
        owner: Any = importlib.import_module(module)
        *parents, self.name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        self.owner = owner
        self.shipped = getattr(owner, self.name)
        self.tried = ast.literal_eval(value)

    def use(self, tried: bool) -> None:
        """Set the attribute to the tried value, or back to the shipped one."""
        setattr(self.owner, self.name, self.tried if tried else self.shipped)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1500, help="calls that build the store")
    parser.add_argument("--ask", type=int, default=400, help="calls timed afterwards")
    parser.add_argument(
        "--try",
        dest="tried",
        metavar="TARGET=VALUE",
        help="time each call, at random, as shipped or with this attribute set (module:Class.NAME=VALUE)",
    )
    args = parser.parse_args()
    setting = Setting(args.tried) if args.tried else None
    meter = Meter()
    calls = collections.Counter[str]()
    draw = random.Random(0)
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
            if setting is not None:
                tried = draw.random() < 0.5
                setting.use(tried)
                meter.side = "tried" if tried else "shipped"
            calls[meter.side] += 1
            call(n)
        meter.on = False
        if setting is not None:
            setting.use(False)
        mem.close()
    sides = list(calls)
    print(f"thread CPU per call, {args.ask} calls after {args.calls} (ms):")
    if setting is not None:
        print(f"  {'':34s} " + " ".join(f"{side} ({calls[side]})".rjust(14) for side in sides))
        print(f"  tried: {args.tried}")
    for label in ["recall injection", *(label for _, _, label in PARTS)]:
        figures = " ".join(f"{meter.seconds[side, label] * 1e3 / calls[side]:14.3f}" for side in sides)
        print(f"  {label:34s} {figures}")


if __name__ == "__main__":
    main()
