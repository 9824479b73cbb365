"""What journaling before the last byte costs a proxied call: this tree against an older one.

Two ``memtap proxy`` processes side by side in the same run, one from this tree and one
from a baseline commit (``--baseline``, default ``0d7534a``: the proxy captured a call only
after sending its answer), each in front of the same local upstream (benchmarks/proxy.py's),
each with its own store and spool: a DuckDB file (the journal's cost alone), or a schema of
one PostgreSQL database (``--postgres URL``: also the commit of the call to the shared store
before its answer, and the session's latest-turn check before each call). Sequential JSON
and SSE calls of one session, the two proxies in alternating rounds (``--runs``; medians of
the rounds' medians, so a busy moment of a shared machine moves one round, not the result).
Counts and time are bounded; nothing leaves 127.0.0.1.

    python benchmarks/proxy_journal.py [--requests 300] [--runs 5]
                                       [--postgres postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from proxy import free_port, median, sequential, wait_for

ROOT = Path(__file__).resolve().parent.parent


def baseline_tree(rev: str, into: Path) -> Path:
    """The source folders the proxy runs from, as of ``rev`` (git archive)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "core/src", "contrib/proxy/src"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def start_proxy(
    src: Path | None, store: str, home: Path, upstream: str
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONHASHSEED": "0", "MEMTAP_HOME": str(home)}
    env.pop("MEMTAP_SPOOL", None)
    if src is not None:
        env["PYTHONPATH"] = f"{src / 'core/src'}:{src / 'contrib/proxy/src'}"
    cmd = [sys.executable, "-m", "memtap.cli", "proxy", "--port", str(port), "--store", store]
    cmd += ["--openai-upstream", upstream, "--log-level", "warning", "--session", "bench"]
    return subprocess.Popen(cmd, env=env), f"http://127.0.0.1:{port}/v1/chat/completions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300, help="sequential calls per round")
    parser.add_argument("--runs", type=int, default=5, help="alternating rounds")
    parser.add_argument("--baseline", default="0d7534a", help="the commit to compare with")
    parser.add_argument(
        "--postgres", default=None, help="a PostgreSQL URL: schemas on it instead of DuckDB files"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="memtap-journal-bench-"))
    (work / "baseline").mkdir()
    base_src = baseline_tree(args.baseline, work / "baseline")
    up_port = free_port()
    up = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks/proxy.py"), "--serve-upstream", str(up_port)]
    )
    upstream = f"http://127.0.0.1:{up_port}"
    schemas: list[str] = []
    procs = [up]
    try:
        urls = {}
        for label, src in (("this tree", None), (f"baseline {args.baseline}", base_src)):
            if args.postgres:
                schema = f"memtap_bench_{uuid.uuid4().hex[:10]}"
                schemas.append(schema)
                store = f"{args.postgres}{'&' if '?' in args.postgres else '?'}schema={schema}"
            else:
                store = f"duckdb:///{work / label.split()[0]}.duckdb"
            proc, url = start_proxy(src, store, work / f"home-{len(urls)}", upstream)
            procs.append(proc)
            urls[label] = url
        direct = f"{upstream}/v1/chat/completions"
        wait_for(direct)
        for url in urls.values():
            wait_for(url)
        kind = "PostgreSQL" if args.postgres else "DuckDB file"
        print(f"store: {kind}, spool on; {args.runs} rounds of {args.requests} sequential calls; medians")
        for stream in (False, True):
            figures: dict[str, list[float]] = {label: [] for label in ["direct", *urls]}
            for r in range(args.runs):
                order = list(urls.items()) if r % 2 == 0 else list(reversed(urls.items()))
                totals, _ = sequential(direct, args.requests, stream)
                figures["direct"].append(median(totals))
                for label, url in order:
                    totals, _ = sequential(url, args.requests, stream)
                    figures[label].append(median(totals))
            name = "SSE" if stream else "JSON"
            results = {label: 1000 * median(values) for label, values in figures.items()}
            for label, value in results.items():
                print(f"{name:5} {label:28} {value:8.3f} ms")
            this, base = list(results.values())[1:]
            print(f"{name:5} {'journal first, added':28} {this - base:+8.3f} ms")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        if args.postgres and schemas:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as conn:
                for schema in schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
