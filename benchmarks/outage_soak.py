"""Soak: many threads calling a registered openai client for a while, with optional storage
outages, then proof that nothing was lost or duplicated.

    python benchmarks/outage_soak.py [--store URL] [--threads 32] [--seconds 60] [--outage-every 10]

The store defaults to a temporary DuckDB file; pass ``postgresql://...`` to soak
PostgreSQL. With ``--outage-every N`` the store is "down" (every call raises StoreError)
for N/2 seconds out of every N: calls keep succeeding, exchanges wait in the spool and are
stored when it is back. At the end: calls made, exchanges stored, spooled, failed writes,
and whether every exchange is stored exactly once.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai

import memtap
from memtap.storage.store import StoreError
from memtap.testing.server import ScriptedModelServer


class Outages:
    """Wraps a store: down for half of every ``period`` seconds (0: never)."""

    def __init__(self, inner: Any, period: float) -> None:
        self.inner, self.period, self.url = inner, period, inner.url
        self.started = time.monotonic()
        self.failures = 0

    def _down(self) -> bool:
        if not self.period:
            return False
        return (time.monotonic() - self.started) % self.period >= self.period / 2

    def write_exchanges(self, exchanges: Sequence[Any]) -> None:
        if self._down():
            self.failures += 1
            raise StoreError("injected outage")
        self.inner.write_exchanges(exchanges)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", default=None)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--outage-every", type=float, default=0.0)
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = args.store or f"duckdb:///{Path(tmp.name) / 'soak.duckdb'}"
    with ScriptedModelServer() as server:
        opened = memtap.Memory(url, spool=False).store
        store = Outages(opened, args.outage_every)
        mem = memtap.Memory(
            store, spool=Path(tmp.name) / "spool", history=memtap.HistoryBudget(max_messages=10)
        )
        client = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-soak", max_retries=0)
        )
        deadline = time.monotonic() + args.seconds
        made = [0] * args.threads
        errors: list[BaseException] = []
        run = f"soak{int(time.time())}"

        def work(t: int) -> None:
            with mem.scope(entity_id=f"{run}-e{t % 8}", session_id=f"{run}-s{t}"):
                while time.monotonic() < deadline:
                    try:
                        client.chat.completions.create(
                            model="m", messages=[{"role": "user", "content": f"t{t} call {made[t]}"}]
                        )
                        made[t] += 1
                    except BaseException as exc:
                        errors.append(exc)
                        return

        started = time.monotonic()
        threads = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.monotonic() - started
        store.period = 0  # storage is back for good
        flushed = mem.flush(300)
        calls = sum(made)
        stored = sum(1 for t in range(args.threads) for _ in opened.exchanges(session_id=f"{run}-s{t}"))
        spool = mem.spool.stats if mem.spool else None
        mem.close()
    ok = flushed and not errors and stored == calls
    print(f"store: {url}")
    print(f"threads {args.threads}, {elapsed:.1f} s, outages every {args.outage_every or '-'} s")
    print(f"calls made        {calls} ({calls / elapsed:.0f}/s), call errors {len(errors)}")
    print(f"exchanges stored  {stored}")
    print(f"spooled           {spool.spooled if spool else 0}, dropped {spool.dropped if spool else 0}")
    print(f"failed writes     {store.failures} (retried)")
    print("nothing lost, nothing duplicated" if ok else "MISMATCH: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
