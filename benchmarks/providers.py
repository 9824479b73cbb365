"""Overhead of memtap per provider SDK: a registered client against the bare SDK, same run.

For every provider whose SDK and memtap plugin are importable, a bare and a registered client
talk to the same local scripted server; calls alternate (bare, registered, registered, bare,
...) so machine noise hits both alike. Reported per provider: median per-call time of each,
the added median and the ratio, for non-streamed calls and for streams (time to the first
event and to the end). The registered client calls in one session, so once warm it injects
a full history budget (20 messages) on every call.

Each provider is a :class:`Driver` in :data:`DRIVERS`: add an entry for a new provider.

    python benchmarks/providers.py [--calls 500] [--only anthropic,google] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import memtap
from memtap.testing.server import ScriptedModelServer

QUESTION = "What is the capital of Japan? Answer in one word."


@dataclass(frozen=True)
class Driver:
    """How to benchmark one provider: the modules to import, a client for the server, one
    non-streamed call, and one streamed call returning its events as they arrive."""

    sdk: str
    plugin: str
    make: Callable[[ScriptedModelServer], Any]
    call: Callable[[Any], Any]
    stream: Callable[[Any], Iterable[Any]]


# -- drivers -------------------------------------------------------------------------------


def _openai(server: ScriptedModelServer) -> Any:
    import openai

    return openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)


def _openai_call(client: Any) -> Any:
    return client.chat.completions.create(model="bench", messages=[{"role": "user", "content": QUESTION}])


def _openai_stream(client: Any) -> Iterable[Any]:
    messages = [{"role": "user", "content": QUESTION}]
    return client.chat.completions.create(model="bench", messages=messages, stream=True)


def _anthropic(server: ScriptedModelServer) -> Any:
    import anthropic

    return anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="sk-ant-bench", max_retries=0)


def _anthropic_call(client: Any) -> Any:
    return client.messages.create(
        model="bench", max_tokens=64, messages=[{"role": "user", "content": QUESTION}]
    )


def _anthropic_stream(client: Any) -> Iterable[Any]:
    messages = [{"role": "user", "content": QUESTION}]
    return client.messages.create(model="bench", max_tokens=64, messages=messages, stream=True)


def _google(server: ScriptedModelServer) -> Any:
    from google import genai
    from google.genai import types

    return genai.Client(api_key="bench", http_options=types.HttpOptions(base_url=server.gemini_base_url))


def _google_call(client: Any) -> Any:
    return client.models.generate_content(model="bench", contents=QUESTION)


def _google_stream(client: Any) -> Iterable[Any]:
    return client.models.generate_content_stream(model="bench", contents=QUESTION)


def _litellm_router(server: ScriptedModelServer) -> Any:
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    params = {"model": "openai/bench", "api_base": server.openai_base_url, "api_key": "sk-bench"}
    return litellm.Router(model_list=[{"model_name": "bench", "litellm_params": params}])


def _litellm_call(client: Any) -> Any:
    return client.completion(model="bench", messages=[{"role": "user", "content": QUESTION}])


def _litellm_stream(client: Any) -> Iterable[Any]:
    return client.completion(model="bench", messages=[{"role": "user", "content": QUESTION}], stream=True)


#: Every benchmarked provider, by name.
DRIVERS: dict[str, Driver] = {
    "openai": Driver("openai", "memtap_openai", _openai, _openai_call, _openai_stream),
    "anthropic": Driver("anthropic", "memtap_anthropic", _anthropic, _anthropic_call, _anthropic_stream),
    "google": Driver("google.genai", "memtap_google", _google, _google_call, _google_stream),
    # A Router per client (the litellm module itself is process-wide: see providers_extra.py).
    "litellm": Driver("litellm", "memtap_litellm", _litellm_router, _litellm_call, _litellm_stream),
}


# -- measuring -----------------------------------------------------------------------------


def _timed_call(driver: Driver, client: Any) -> tuple[float, float]:
    started = time.perf_counter()
    driver.call(client)
    elapsed = time.perf_counter() - started
    return elapsed, elapsed


def _timed_stream(driver: Driver, client: Any) -> tuple[float, float]:
    started = time.perf_counter()
    first = None
    for _event in driver.stream(client):
        if first is None:
            first = time.perf_counter() - started
    return first or 0.0, time.perf_counter() - started


def _measure(
    timed: Callable[[Driver, Any], tuple[float, float]], driver: Driver, bare: Any, tapped: Any, calls: int
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"bare_first": [], "bare_total": [], "tapped_first": [], "tapped_total": []}
    for _ in range(min(50, calls)):
        timed(driver, bare)
        timed(driver, tapped)
    for i in range(calls):
        order = (("bare", bare), ("tapped", tapped)) if i % 2 == 0 else (("tapped", tapped), ("bare", bare))
        for name, client in order:
            first, total = timed(driver, client)
            out[f"{name}_first"].append(first * 1e3)
            out[f"{name}_total"].append(total * 1e3)
    return out


def _row(provider: str, scenario: str, bare: list[float], tapped: list[float]) -> dict[str, Any]:
    b, t = statistics.median(bare), statistics.median(tapped)
    return {
        "provider": provider,
        "scenario": scenario,
        "bare_ms": b,
        "memtap_ms": t,
        "added_ms": t - b,
        "ratio": t / b,
    }


def available(names: Iterable[str]) -> dict[str, Driver]:
    """The drivers whose SDK and memtap plugin can be imported."""
    found = {}
    for name in names:
        driver = DRIVERS[name]
        try:
            importlib.import_module(driver.sdk)
            importlib.import_module(driver.plugin)
        except ImportError:
            print(f"skipping {name}: {driver.sdk} or {driver.plugin} is not installed", file=sys.stderr)
            continue
        found[name] = driver
    return found


def run(name: str, driver: Driver, calls: int, store: str) -> list[dict[str, Any]]:
    """Benchmark one provider; its rows."""
    plugin = importlib.import_module(driver.plugin)
    with ScriptedModelServer() as server:
        mem = memtap.Memory(store, plugins=[plugin], entry_points=False)
        bare = driver.make(server)
        tapped = mem.register(driver.make(server))
        with mem.scope(entity_id="bench", session_id=f"bench-{name}"):
            plain = _measure(_timed_call, driver, bare, tapped, calls)
            streamed = _measure(_timed_stream, driver, bare, tapped, calls // 2)
        mem.flush()
        mem.close()
    return [
        _row(name, "json", plain["bare_total"], plain["tapped_total"]),
        _row(name, "stream first event", streamed["bare_first"], streamed["tapped_first"]),
        _row(name, "stream total", streamed["bare_total"], streamed["tapped_total"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500, help="calls per client per scenario")
    parser.add_argument("--only", default=",".join(DRIVERS), help="comma-separated providers")
    parser.add_argument("--store", default="memory://", help="store URL (default: in-process)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    rows = []
    for name, driver in available(n for n in args.only.split(",") if n).items():
        rows += run(name, driver, args.calls, args.store)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        return
    print(f"store: {args.store}; {args.calls} calls per client per scenario, interleaved; history budget 20")
    print(f"{'provider':10} {'scenario':20} {'bare ms':>9} {'memtap ms':>10} {'added ms':>9} {'ratio':>7}")
    for r in rows:
        cells = f"{r['bare_ms']:9.3f} {r['memtap_ms']:10.3f} {r['added_ms']:9.3f} {r['ratio']:7.3f}"
        print(f"{r['provider']:10} {r['scenario']:20} {cells}")


if __name__ == "__main__":
    main()
