"""How long after a turn is captured it can be recalled, in the same process, without a flush.

Each round captures one new statement in a new session of one entity (``Memory.capture``,
DuckDB file store, spool on, the entity's index loaded as in a running app), then polls
``Memory.recall`` with a question using the statement's words until the statement comes
back; the time from ``capture`` returning to that recall is reported (p50, p95, max), and
how many rounds never got it within ``--limit`` seconds.

    python benchmarks/recallable_after.py [--rounds 50] [--embedder off|default] [--limit 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import memtap
from memtap.protocol.model import Message

COLOURS = ["teal", "navy", "ochre", "maroon", "olive", "coral", "amber", "indigo", "beige", "cyan"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--embedder", default="off", help="'off' (words only) or an embedder spec")
    parser.add_argument("--limit", type=float, default=40.0, help="seconds to wait for one turn")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        mem = memtap.Memory(
            f"duckdb:///{Path(folder) / 'm.duckdb'}",
            embedder=False if args.embedder == "off" else args.embedder,
            spool=Path(folder) / "spool",
        )
        mem.recall("warm up", entity_id="bench")  # the entity's index, loaded
        waits: list[float] = []
        missed = 0
        for i in range(args.rounds):
            thing = f"{COLOURS[i % len(COLOURS)]} bicycle number {i}"
            said = f"My favourite thing is the {thing}."
            mem.capture(
                [Message("user", said)],
                [Message("assistant", "Noted.")],
                entity_id="bench",
                session_id=f"s{i}",
            )
            start = time.perf_counter()
            while said not in [h.text for h in mem.recall(f"which {thing}?", entity_id="bench", k=3)]:
                if time.perf_counter() - start > args.limit:
                    missed += 1
                    break
                time.sleep(0.001)
            else:
                waits.append(time.perf_counter() - start)
        mem.close()
    if waits:
        ms = sorted(w * 1000 for w in waits)
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
        print(
            f"{len(ms)} of {args.rounds} turns recalled after capture: p50 {statistics.median(ms):.1f} ms, "
            f"p95 {p95:.1f} ms, max {ms[-1]:.1f} ms; {missed} not within {args.limit:.0f} s"
        )
    else:
        print(f"no turn recalled within {args.limit:.0f} s ({missed} rounds)")


if __name__ == "__main__":
    main()
