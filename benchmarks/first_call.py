"""What memtap adds to the *first* call of a fresh process, with long-term memory on.

Each run starts two fresh Python processes, one with a bare openai client and one with a
client registered on a ``memtap.Memory()`` (defaults: the installed embedder, recall and
history on, the durable spool) whose DuckDB store already holds facts and a session history
for the entity the call is attributed to; the order alternates between runs, both talk to
the same local scripted server. Each child times its own steps (imports, ``Memory()``,
``register``, the first call, the second call) and reports them; the figure is the median
over the runs of (registered first call - bare first call).

Every child gets a copy of the same prepared store and its own ``MEMTAP_HOME``.
``--quick-table ready`` (default) points ``MEMTAP_CACHE`` at a cache where the embedder's
quick query table is built (the state of any machine after its first ~45 s of use);
``--quick-table none`` gives every child an empty cache (a brand-new machine: the table
starts building in the background of the first call).

``--compare-words`` adds a third child per run, registered without an embedder (recall by
words only): what it adds is memtap's cost without any model to load.

    python benchmarks/first_call.py [--runs 15] [--facts 2000] [--quick-table ready|none]
        [--compare-words] [--template PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memtap.testing.server import ScriptedModelServer

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import openai
mode, base_url, store = sys.argv[1], sys.argv[2], sys.argv[3]
steps = {"import_openai": time.perf_counter() - t0}
client = openai.OpenAI(base_url=base_url, api_key="sk-first-call", max_retries=0)
# The SDK imports its resources on first access; memtap's register() touches the ones it
# patches. Every child pays that before the clock starts, so first calls compare alike.
client.chat.completions, client.responses
scope = None
if mode == "memtap":
    t = time.perf_counter()
    import memtap
    steps["import_memtap"] = time.perf_counter() - t
    t = time.perf_counter()
    mem = memtap.Memory(store)
    steps["memory"] = time.perf_counter() - t
    t = time.perf_counter()
    mem.register(client)
    steps["register"] = time.perf_counter() - t
    scope = mem.scope(entity_id="bench", session_id="bench")
    scope.__enter__()
messages = [{"role": "user", "content": "which city did we visit last summer?"}]
t = time.perf_counter()
client.chat.completions.create(model="bench", messages=messages)
steps["first_call"] = time.perf_counter() - t
time.sleep(1.0)  # the app does something else; memtap's background loads finish
t = time.perf_counter()
client.chat.completions.create(model="bench", messages=messages)
steps["second_call"] = time.perf_counter() - t
t = time.perf_counter()
client.chat.completions.create(model="bench", messages=messages)
steps["third_call"] = time.perf_counter() - t
if mode == "memtap":
    scope.__exit__(None, None, None)
    t = time.perf_counter()
    mem.close()
    steps["close"] = time.perf_counter() - t
print(json.dumps(steps))
"""

FACTS = (
    "we visited Lisbon last summer",
    "my sister likes ramen",
    "I work at a bakery in Kyoto",
    "my dog is a beagle called Mochi",
)


def prepare_store(path: Path, facts: int) -> None:
    """A DuckDB store with ``facts`` facts (embedded) and a 20-message session for
    entity ``bench``."""
    import memtap

    mem = memtap.Memory(f"duckdb:///{path}", spool=False)
    for i in range(facts):
        mem.remember(f"{FACTS[i % len(FACTS)]} (note {i})", entity_id="bench")
    for i in range(10):
        mem.capture(
            [memtap.Message(role="user", content=f"earlier question {i}")],
            [memtap.Message(role="assistant", content=f"earlier answer {i}")],
            entity_id="bench",
            session_id="bench",
        )
    mem.flush()
    mem.recall("warm up", entity_id="bench")  # waits for the facts' vectors
    mem.longterm.engine.flush(120)
    mem.close()


#: The children of one run: a bare client, and a registered one with the default embedder
#: (``memtap``) or with none (``words``: recall by words only, no model to load).
EMBEDDER_OF = {"memtap": "default", "words": "off"}


def run_child(mode: str, base_url: str, template: Path, work: Path, cache: Path | None) -> dict[str, float]:
    store = work / f"{mode}.duckdb"
    shutil.copy(template, store)
    home = work / f"home-{mode}"
    env = dict(os.environ, MEMTAP_HOME=str(home), PYTHONHASHSEED="0")
    env["MEMTAP_EMBEDDER"] = EMBEDDER_OF.get(mode, "default")
    env["MEMTAP_CACHE"] = str(cache if cache is not None else work / f"cache-{mode}")
    child_mode = "bare" if mode == "bare" else "memtap"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, child_mode, base_url, f"duckdb:///{store}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        sys.exit(f"the {mode} child failed:\n{out.stderr}")
    steps: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    shutil.rmtree(home, ignore_errors=True)
    store.unlink(missing_ok=True)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--quick-table", choices=("ready", "none"), default="ready")
    parser.add_argument(
        "--compare-words", action="store_true", help="also run a registered child without an embedder"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--template", type=Path, help="keep the prepared store in this file (reused when it exists)"
    )
    args = parser.parse_args()
    modes = ["bare", "memtap", *(["words"] if args.compare_words else [])]
    with tempfile.TemporaryDirectory(prefix="memtap-first-call-") as tmp, ScriptedModelServer() as server:
        work = Path(tmp)
        cache: Path | None = None
        if args.quick_table == "ready":
            cache = Path(os.environ.get("MEMTAP_CACHE") or work / "cache")
            os.environ["MEMTAP_CACHE"] = str(cache)
            from memtap_minilm import MiniLMEmbedder

            if not MiniLMEmbedder().prepare_quick_queries(timeout=600):
                sys.exit("the quick query table could not be built")
        template = args.template or work / "template.duckdb"
        if not template.exists():
            prepare_store(template, args.facts)
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for run in range(args.runs):
            shift = run % len(modes)  # every mode goes first as often as the others
            for mode in modes[shift:] + modes[:shift]:
                results[mode].append(run_child(mode, server.openai_base_url, template, work, cache))
    report = summarise(results)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"first calls of a fresh process, {args.runs} runs, {args.facts} facts, quick table "
        f"{args.quick_table}, medians (ms):"
    )
    for key, value in report.items():
        print(f"  {key:44s} {value:8.1f}")


STEPS = {"first_call": "first call", "second_call": "second call (1 s later)", "third_call": "third call"}


def summarise(results: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    def med(mode: str, step: str) -> float:
        return statistics.median(r[step] for r in results[mode]) * 1e3

    def added(mode: str, step: str) -> list[float]:
        return [(m[step] - b[step]) * 1e3 for b, m in zip(results["bare"], results[mode])]

    report: dict[str, Any] = {}
    for step, label in STEPS.items():
        report[f"bare {label}"] = med("bare", step)
        for mode in results:
            if mode == "bare":
                continue
            report[f"{mode}: {label}"] = med(mode, step)
            report[f"{mode}: added to the {label} (median)"] = statistics.median(added(mode, step))
            report[f"{mode}: added to the {label} (max)"] = max(added(mode, step))
    for mode in results:
        if mode == "bare":
            continue
        for step, label in (("import_memtap", "import memtap"), ("memory", "Memory()")):
            report[f"{mode}: {label}"] = med(mode, step)
        report[f"{mode}: register()"] = med(mode, "register")
        report[f"{mode}: close()"] = med(mode, "close")
    return report


if __name__ == "__main__":
    main()
