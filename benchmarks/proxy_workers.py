"""Requests/s through ``memtap proxy --workers N`` on PostgreSQL, for N = 1, 2, 4.

The minimal asyncio upstream of ``benchmarks/proxy.py`` (its own process), ``memtap proxy
--workers N`` on a fresh schema of a PostgreSQL server (``--store``, default the local
test server), and this client: ``--concurrency`` clients on keep-alive connections sending
JSON chat calls for ``--seconds``, each client its own session (so history injection and
capture work as for separate users). Reports req/s and the proxy processes' CPU seconds per
request. The machine running it runs the clients too: on a small machine they compete with
the workers for the same cores.

    python benchmarks/proxy_workers.py [--workers 1 2 4] [--seconds 10] [--concurrency 32]
                                       [--store postgresql://postgres@127.0.0.1:5432/test]
                                       [--embedder off]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from proxy import BODY, cpu_seconds, free_port, run_upstream, wait_for


async def load(url: str, clients: int, seconds: float) -> tuple[int, int, float]:
    """Calls answered (200) and failed in ``seconds`` by ``clients`` concurrent clients."""
    ok = failed = 0
    end = time.perf_counter() + seconds

    async def client(n: int) -> None:
        nonlocal ok, failed
        headers = {"x-memtap-entity": f"user{n}", "x-memtap-session": f"bench{n}"}
        async with httpx.AsyncClient(timeout=30, headers=headers) as http:
            i = 0
            while time.perf_counter() < end:
                body = {**BODY, "messages": [{"role": "user", "content": f"question {i} of client {n}"}]}
                r = await http.post(url, json=body)
                ok, failed = (ok + 1, failed) if r.status_code == 200 else (ok, failed + 1)
                i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    return ok, failed, time.perf_counter() - t0


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def measure(workers: int, store: str, upstream: str, args: argparse.Namespace) -> None:
    port = free_port()
    schema = f"memtap_bench_{uuid.uuid4().hex[:10]}"
    url = f"{store}{'&' if '?' in store else '?'}schema={schema}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTAP_")}
    env["MEMTAP_HOME"] = f"/tmp/memtap-bench-{schema}"
    if args.embedder is not None:
        env["MEMTAP_EMBEDDER"] = args.embedder
    proc = subprocess.Popen(
        [
            *(sys.executable, "-c", "from memtap.cli.main import main; main()", "proxy", "--port", str(port)),
            *(
                "--store",
                url,
                "--openai-upstream",
                upstream,
                "--workers",
                str(workers),
                "--log-level",
                "warning",
            ),
        ],
        env=env,
    )
    try:
        target = f"http://127.0.0.1:{port}/v1/chat/completions"
        wait_for(target, 60)
        time.sleep(2)  # every worker up
        pids = [proc.pid, *children(proc.pid)]
        asyncio.run(load(target, args.concurrency, 2))  # warm-up
        cpu0 = sum(cpu_seconds(p) or 0 for p in pids)
        ok, failed, elapsed = asyncio.run(load(target, args.concurrency, args.seconds))
        cpu = sum(cpu_seconds(p) or 0 for p in pids) - cpu0
        print(
            f"workers={workers}: {ok / elapsed:7.1f} req/s ({ok} answered, {failed} failed, "
            f"{args.concurrency} clients, {elapsed:.1f} s); "
            f"proxy CPU {1000 * cpu / max(ok, 1):.1f} ms/request",
            flush=True,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        import psycopg

        with psycopg.connect(store, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--store", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--embedder", default=None, help="$MEMTAP_EMBEDDER of the proxy (e.g. off)")
    args = parser.parse_args()
    up_port = free_port()
    upstream = multiprocessing.Process(target=run_upstream, args=(up_port,), daemon=True)
    upstream.start()
    print(f"{os.cpu_count()} CPUs; PostgreSQL {args.store.split('@')[-1]}", flush=True)
    for n in args.workers:
        measure(n, args.store, f"http://127.0.0.1:{up_port}", args)
    upstream.terminate()


if __name__ == "__main__":
    main()
