"""Overhead of memtap for providers that do not fit ``providers.py``'s one-client-per-make
shape: the ``litellm`` module (registration is process-wide, so the bare side calls the
module's functions as they were before registration) and AWS Bedrock through boto3 (its own
local bedrock-runtime endpoint, event streams included, from the bedrock plugin's tests).

Same method as ``providers.py`` (whose helpers it reuses): calls interleaved bare/registered,
medians, added ms and ratio; the registered side calls in one session, so once warm it
injects a full history budget (20 messages) on every call.

    python benchmarks/providers_extra.py [--calls 300] [--only litellm-module,bedrock-converse]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import memtap
from memtap.testing.server import ScriptedModelServer

sys.path.insert(0, str(Path(__file__).parent))
from providers import QUESTION, Driver, _measure, _row, _timed_call, _timed_stream

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
BEDROCK_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"

#: A setup yields (plugin module, bare client, client to register, driver).
Setup = Callable[[], Any]


@contextmanager
def litellm_module() -> Iterator[tuple[Any, Any, Any, Driver]]:
    import litellm

    import memtap_litellm

    with ScriptedModelServer() as server:
        kw = {"api_base": server.openai_base_url, "api_key": "sk-bench", "model": "openai/bench"}
        messages = [{"role": "user", "content": QUESTION}]
        # captured before registration: the unpatched module functions
        bare = types.SimpleNamespace(completion=litellm.completion)
        driver = Driver(
            "litellm",
            "memtap_litellm",
            lambda _server: None,
            lambda c: c.completion(messages=messages, **kw),
            lambda c: c.completion(messages=messages, stream=True, **kw),
        )
        yield memtap_litellm, bare, litellm, driver


def _bedrock_server() -> Any:
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "plugins" / "bedrock"))
    from bedrock_server import BedrockServer

    return BedrockServer()


def _bedrock_client(url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="AKIABENCHBENCHBENCH0",
        aws_secret_access_key="bench",
        config=Config(retries={"max_attempts": 1}),
    )


@contextmanager
def bedrock_converse() -> Iterator[tuple[Any, Any, Any, Driver]]:
    import memtap_bedrock

    messages = [{"role": "user", "content": [{"text": QUESTION}]}]

    def stream(c: Any) -> Iterable[Any]:
        return c.converse_stream(modelId=BEDROCK_MODEL, messages=messages)["stream"]

    with _bedrock_server() as server:
        driver = Driver(
            "boto3",
            "memtap_bedrock",
            lambda _server: None,
            lambda c: c.converse(modelId=BEDROCK_MODEL, messages=messages),
            stream,
        )
        yield memtap_bedrock, _bedrock_client(server.base_url), _bedrock_client(server.base_url), driver


@contextmanager
def bedrock_invoke() -> Iterator[tuple[Any, Any, Any, Driver]]:
    import memtap_bedrock

    body = json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": QUESTION}],
        }
    )

    def call(c: Any) -> Any:
        return c.invoke_model(modelId=BEDROCK_MODEL, body=body)["body"].read()

    def stream(c: Any) -> Iterable[Any]:
        return c.invoke_model_with_response_stream(modelId=BEDROCK_MODEL, body=body)["body"]

    with _bedrock_server() as server:
        driver = Driver("boto3", "memtap_bedrock", lambda _server: None, call, stream)
        yield memtap_bedrock, _bedrock_client(server.base_url), _bedrock_client(server.base_url), driver


SETUPS: dict[str, Callable[[], Any]] = {
    "litellm-module": litellm_module,
    "bedrock-converse": bedrock_converse,
    "bedrock-invoke": bedrock_invoke,
}


def run(name: str, calls: int, store: str) -> list[dict[str, Any]]:
    """Benchmark one setup; its rows."""
    with SETUPS[name]() as (plugin, bare, client, driver):
        mem = memtap.Memory(store, plugins=[plugin], entry_points=False)
        tapped = mem.register(client)
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
    parser.add_argument("--calls", type=int, default=300, help="calls per client per scenario")
    parser.add_argument("--only", default=",".join(SETUPS), help="comma-separated setups")
    parser.add_argument("--store", default="memory://", help="store URL (default: in-process)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    rows = []
    for name in (n for n in args.only.split(",") if n):
        try:
            rows += run(name, args.calls, args.store)
        except ImportError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        return
    print(f"store: {args.store}; {args.calls} calls per client per scenario, interleaved; history budget 20")
    print(f"{'setup':18} {'scenario':20} {'bare ms':>9} {'memtap ms':>10} {'added ms':>9} {'ratio':>7}")
    for r in rows:
        cells = f"{r['bare_ms']:9.3f} {r['memtap_ms']:10.3f} {r['added_ms']:9.3f} {r['ratio']:7.3f}"
        print(f"{r['provider']:18} {r['scenario']:20} {cells}")


if __name__ == "__main__":
    main()
