"""Call latency while the store is frozen: PostgreSQL behind a loopback TCP forwarder that
stops forwarding bytes (connections stay open) for ``--freeze`` seconds.

In-process (a registered openai client) and through the proxy, calls are made back to
back during the freeze on three kinds of session: new ones, one this process has cached,
and ones that have stored history this process has not read yet. Reported per kind: how
many calls, the median and the worst time, next to a bare client's (in-process) or the
proxy's usual time (measured before the freeze). Through the proxy, one more uncached
session's request is in flight in the background when the measured calls start (its read
awaited off the event loop), to show that it does not hold up the others.

    MEMTAP_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        python benchmarks/frozen_store.py [--freeze 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
import psycopg

import memtap
from memtap.protocol.model import Message
from memtap.testing.server import ScriptedModelServer
from memtap.testing.tcpfaults import TcpForwarder

ENTITY = "frozen-bench"
KNOWN = 40


def _urls(base: str, fwd: TcpForwarder, schema: str) -> tuple[str, str]:
    parts = urlsplit(base)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    through = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{fwd.port}"))
    sep = "&" if "?" in base else "?"
    return f"{through}{sep}schema={schema}", f"{base}{sep}schema={schema}"


def _seed(direct: str) -> None:
    with memtap.Memory(direct, spool=False, embedder=False) as other:
        for i in range(KNOWN):
            other.capture(
                [Message("user", f"fact {i}")],
                [Message("assistant", "ok")],
                entity_id=ENTITY,
                session_id=f"known-{i}",
            )
        other.flush(60)


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def _freeze_for(fwd: TcpForwarder, seconds: float) -> threading.Timer:
    fwd.freeze()
    timer = threading.Timer(seconds, fwd.heal)
    timer.start()
    return timer


def _during(seconds: float, kinds: dict[str, Callable[[int], Callable[[], Any]]]) -> dict[str, list[float]]:
    """Call each kind in turn until ``seconds`` have passed; times in ms."""
    times: dict[str, list[float]] = {k: [] for k in kinds}
    end = time.monotonic() + seconds - 0.5
    i = 0
    while time.monotonic() < end:
        for kind, make in kinds.items():
            times[kind].append(_timed(make(i)))
        i += 1
        time.sleep(0.05)
    return times


def _row(mode: str, kind: str, times: list[float], usual: float) -> dict[str, float | str | int]:
    return {
        "mode": mode,
        "session": kind,
        "calls": len(times),
        "usual_ms": usual,
        "median_ms": statistics.median(times) if times else float("nan"),
        "max_ms": max(times) if times else float("nan"),
    }


def in_process(
    server: ScriptedModelServer, fwd: TcpForwarder, url: str, freeze: float, home: Path
) -> list[dict[str, Any]]:
    mem = memtap.Memory(url, spool=home / "spool-a")
    bare = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0))
    messages = [{"role": "user", "content": "hello"}]

    def ask(session: str) -> Callable[[], Any]:
        def call() -> Any:
            with mem.scope(entity_id=ENTITY, session_id=session):
                return client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]

        return call

    ask("cached")()
    mem.flush(30)
    usual = statistics.median(
        _timed(lambda: bare.chat.completions.create(model="m", messages=messages)) for _ in range(20)
    )  # type: ignore[arg-type]
    timer = _freeze_for(fwd, freeze)
    times = _during(
        freeze,
        {
            "new": lambda i: ask(f"new-{uuid.uuid4().hex}"),
            "cached": lambda i: ask("cached"),
            "stored, not read yet": lambda i: ask(f"known-{i % (KNOWN // 2)}"),
        },
    )
    timer.join()
    mem.flush(60)
    mem.close()
    return [_row("in-process", kind, t, usual) for kind, t in times.items()]


def proxy(
    server: ScriptedModelServer, fwd: TcpForwarder, url: str, freeze: float, home: Path
) -> list[dict[str, Any]]:
    from memtap_proxy import Proxy, ProxyConfig, ProxyThread

    mem = memtap.Memory(url, spool=home / "spool-b")
    config = ProxyConfig(openai_upstream=server.base_url, anthropic_upstream=server.base_url)
    thread = ProxyThread(Proxy(config, mem)).start()
    client = openai.OpenAI(base_url=thread.url + "/v1", api_key="sk-bench", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "hello"}]

    def ask(session: str) -> Callable[[], Any]:
        def call() -> Any:
            headers = {"x-memtap-entity": ENTITY, "x-memtap-session": session}
            return client.chat.completions.create(model="m", messages=messages, extra_headers=headers)  # type: ignore[arg-type]

        return call

    ask("cached")()
    mem.flush(30)
    usual = statistics.median(_timed(ask("cached")) for _ in range(20))
    timer = _freeze_for(fwd, freeze)
    stuck = threading.Thread(target=ask(f"known-{KNOWN - 1}"), daemon=True)
    stuck.start()
    times = _during(
        freeze,
        {
            "new": lambda i: ask(f"new-{uuid.uuid4().hex}"),
            "cached": lambda i: ask("cached"),
            "stored, not read yet": lambda i: ask(f"known-{KNOWN // 2 + i % (KNOWN // 2 - 1)}"),
        },
    )
    timer.join()
    stuck.join(60)
    mem.flush(60)
    thread.stop()
    mem.close()
    return [_row("proxy", kind, t, usual) for kind, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--freeze", type=float, default=20.0, help="seconds the store stays frozen")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    base = os.environ.get("MEMTAP_TEST_POSTGRES_URL")
    if not base:
        sys.exit("set MEMTAP_TEST_POSTGRES_URL (e.g. postgresql://postgres@127.0.0.1:5432/test)")
    parts = urlsplit(base)
    schema = f"memtap_frozen_bench_{uuid.uuid4().hex[:8]}"
    rows: list[dict[str, Any]] = []
    try:
        with (
            ScriptedModelServer() as server,
            TcpForwarder(parts.port or 5432, parts.hostname or "127.0.0.1") as fwd,
            tempfile.TemporaryDirectory() as tmp,
        ):
            url, direct = _urls(base, fwd, schema)
            _seed(direct)
            rows += in_process(server, fwd, url, args.freeze, Path(tmp))
            rows += proxy(server, fwd, url, args.freeze, Path(tmp))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        return
    print(f"store frozen for {args.freeze:.0f} s (PostgreSQL behind a frozen TCP forwarder); times in ms")
    print(f"{'mode':11} {'session':22} {'calls':>6} {'usual':>8} {'median':>9} {'max':>9}")
    for r in rows:
        cells = f"{r['calls']:6d} {r['usual_ms']:8.1f} {r['median_ms']:9.1f} {r['max_ms']:9.1f}"
        print(f"{r['mode']:11} {r['session']:22} {cells}")


if __name__ == "__main__":
    main()
