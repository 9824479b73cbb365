"""Instructions memtap adds to a call, counted (not timed): a registered openai client against
the bare SDK, in one process, under valgrind's callgrind.

Wall-clock A/B runs on a shared two-core machine move by ±30% within minutes; instruction
counts do not (the same run twice differs by about 1%), so a change of a few per cent in
memtap's per-call work shows. What they do not show: cache misses, system calls' kernel
time, waiting for the GIL. Use them to attribute and compare work, and ``overhead.py`` for
what a user waits.

The process runs warm-up calls, then N bare calls, then N registered calls (and a flush),
asking callgrind to dump its counters between the phases; the report is the calling
thread's instructions per call of each phase (the request path: what memtap does before
the call returns), and the other threads' (the capture writer, the store's, the local
server's). The garbage collector is off during the phases: a full collection lands in one
window and not another, and a median of wall-clock times never sees it either.

    python benchmarks/instructions.py [--stream] [--history 20] [--calls 40]

Needs ``valgrind`` (``apt-get install valgrind``); a run takes about two minutes.
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

_PHASES = ("warm", "bare", "tapped")


def _dump(out: Path, tag: str) -> None:
    """Ask callgrind to dump its counters (zeroing them) and wait for the files."""
    before = set(glob.glob(f"{out}/callgrind.out.*"))
    subprocess.run(["callgrind_control", "-d", tag, str(os.getpid())], capture_output=True, check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and set(glob.glob(f"{out}/callgrind.out.*")) == before:
        time.sleep(0.05)
    time.sleep(0.5)  # every thread's file


def _phases(out: Path, calls: int, stream: bool, history: int) -> None:
    """The measured process (under callgrind)."""
    import openai

    import memtap
    from memtap.testing.server import ScriptedModelServer

    sys.path.insert(0, str(Path(__file__).parent))
    import overhead

    call = overhead.call_stream if stream else overhead.call_json
    with ScriptedModelServer() as server:
        mem = memtap.Memory(
            f"duckdb:///{out / 'bench.duckdb'}",
            history=memtap.HistoryBudget(max_messages=history, max_tokens=100_000),
            **overhead.NO_LONGTERM,  # type: ignore[arg-type]
        )
        bare = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        tapped = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        )
        with mem.scope(entity_id="bench", session_id=f"bench-{history}"):
            for _ in range(30):
                call(tapped)
                call(bare)
            mem.flush()
            gc.collect()
            gc.disable()
            _dump(out, "warm")
            for _ in range(calls):
                call(bare)
            _dump(out, "bare")
            for _ in range(calls):
                call(tapped)
            mem.flush()
            _dump(out, "tapped")
        mem.close()


def _counts(out: Path) -> dict[str, dict[int, int]]:
    """Instructions by phase and callgrind thread number (1 is the calling thread)."""
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    for path in glob.glob(f"{out}/callgrind.out.*"):
        head = Path(path).read_text(errors="replace")[:4000]
        trigger = re.search(r"^desc: Trigger: dump (\w+)", head, re.M)  # callgrind_control -d TAG
        thread = re.search(r"^thread: (\d+)", head, re.M)
        total = re.search(r"^summary: (\d+)", head, re.M)
        if trigger and thread and total and trigger.group(1) in _PHASES:
            counts[trigger.group(1)][int(thread.group(1))] = int(total.group(1))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=40, help="calls per phase")
    parser.add_argument("--stream", action="store_true", help="streamed calls")
    parser.add_argument("--history", type=int, default=0, help="history budget in messages (0: capture only)")
    parser.add_argument("--phases", help=argparse.SUPPRESS)  # the measured process's output directory
    args = parser.parse_args()
    if args.phases:
        _phases(Path(args.phases), args.calls, args.stream, args.history)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        command = [
            "valgrind", "--tool=callgrind", "--separate-threads=yes",
            f"--callgrind-out-file={out}/callgrind.out.%p",
            sys.executable, __file__, "--phases", str(out), "--calls", str(args.calls),
            "--history", str(args.history), *(["--stream"] if args.stream else []),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same hashing every run
        run = subprocess.run(command, capture_output=True, text=True, env=env)
        counts = _counts(out)
        if run.returncode != 0 or not counts.get("bare") or not counts.get("tapped"):
            sys.exit(f"the measured process failed ({run.returncode}):\n{run.stderr[-3000:]}")
    bare, tapped = counts["bare"], counts["tapped"]
    n = args.calls
    caller_bare, caller_tapped = bare.get(1, 0) / n, tapped.get(1, 0) / n
    others = (sum(tapped.values()) - tapped.get(1, 0) - sum(bare.values()) + bare.get(1, 0)) / n
    kind = "stream" if args.stream else "json"
    label = f"{kind}, history {args.history} msgs" if args.history else f"{kind}, capture only"
    print(f"{label}: {n} calls per phase, instructions per call")
    print(f"  calling thread: bare {caller_bare / 1e3:,.0f}K, registered {caller_tapped / 1e3:,.0f}K")
    print(f"  added on the calling thread: {(caller_tapped - caller_bare) / 1e3:,.1f}K ")
    print(f"  added on other threads (writer, store, server): {others / 1e6:,.2f}M")


if __name__ == "__main__":
    main()
