"""An app that resends its conversation: what memtap adds per call as the conversation grows
past the history cache (200 messages), against the bare SDK in the same run.

Two openai clients (bare, and registered with memtap) each keep and resend their own
conversation to the same local scripted server; turns alternate between them so machine noise
hits both alike. Reported per range of turns: the median per-call time of each, the added
median and the ratio, and the median time memtap's request path itself took (reading the
request, finding what it resends, choosing and injecting history: ``Call.prepare``, timed
inside the call, which the SDK's own per-message cost and machine noise do not blur); then
what memtap stored (each turn once: 2 messages per turn).

    python benchmarks/resend.py [--turns 300] [--window 0] [--store duckdb:///...]
    python benchmarks/resend.py --plan   # only the cost of finding what a request resends
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

import memtap
from memtap.formats.openai_chat import read_chat_request
from memtap.history.conversation import HistoryBudget, plan_history
from memtap.protocol.model import Message
from memtap.request.tap import Call
from memtap.testing.server import ScriptedModelServer

#: Durations of Call.prepare, in ms, in call order.
PREPARE: list[float] = []


def _timed_prepare() -> None:
    original = Call.prepare

    def prepare(self: Call, body: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(self, body)
        finally:
            PREPARE.append((time.perf_counter() - started) * 1e3)

    Call.prepare = prepare  # type: ignore[method-assign]


def ask(client: openai.OpenAI, conversation: list[dict[str, Any]], window: int) -> float:
    sent = conversation if window <= 0 else conversation[-window:]
    started = time.perf_counter()
    reply = client.chat.completions.create(model="bench", messages=sent)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    conversation.append({"role": "assistant", "content": reply.choices[0].message.content})
    return elapsed * 1e3


def run(turns: int, window: int, store: str) -> None:
    _timed_prepare()
    with ScriptedModelServer() as server:
        mem = memtap.Memory(store, embedder=False, recall=memtap.RecallBudget(k=0))
        bare = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        tapped = mem.register(
            openai.OpenAI(base_url=server.openai_base_url, api_key="sk-bench", max_retries=0)
        )
        talks: dict[str, list[dict[str, Any]]] = {"bare": [], "tapped": []}
        times: dict[str, list[float]] = {"bare": [], "tapped": []}
        clients = {"bare": bare, "tapped": tapped}
        with mem.scope(entity_id="bench", session_id="resend"):
            for turn in range(turns):
                order = ("bare", "tapped") if turn % 2 == 0 else ("tapped", "bare")
                for name in order:
                    talks[name].append({"role": "user", "content": f"Question number {turn}: what next?"})
                    times[name].append(ask(clients[name], talks[name], window))
        assert mem.flush(60)
        stored = mem.stats()["messages"]
        mem.close()
    style = "everything" if window <= 0 else f"a window of {window}"
    print(f"{turns} turns, the app resends {style}; store {store}")
    print(f"{'turns':>11} {'bare ms':>9} {'memtap ms':>10} {'added ms':>9} {'ratio':>7} {'prepare ms':>11}")
    step = max(1, turns // 6)
    for start in range(0, turns, step):
        b = statistics.median(times["bare"][start : start + step])
        t = statistics.median(times["tapped"][start : start + step])
        p = statistics.median(PREPARE[start : start + step])
        print(f"{start:>5}-{start + step - 1:<5} {b:9.3f} {t:10.3f} {t - b:9.3f} {t / b:7.3f} {p:11.3f}")
    print(f"stored messages: {stored} (2 per turn: {2 * turns})")


def plan_costs(turns: int) -> None:
    """The median cost of :func:`memtap.history.conversation.plan_history` with a full cache (200
    messages) for a request resending everything, a window of 41, and only the new message."""
    conversation: list[Message] = []
    for turn in range(turns):
        question = f"Question number {turn}: what next?"
        conversation += [Message("user", question), Message("assistant", f"You said: {question}")]
    body = {"messages": [{"role": m.role, "content": m.content} for m in conversation]}
    body["messages"].append({"role": "user", "content": "new"})
    request = read_chat_request(body).messages
    history, budget = conversation[-200:], HistoryBudget()
    print(f"plan_history, 200 cached messages, a conversation of {len(request)} messages")
    for name, sent in [("everything", request), ("window of 41", request[-41:]), ("only new", request[-1:])]:
        runs = []
        for _ in range(21):
            started = time.perf_counter()
            for _ in range(200):
                plan_history(history, sent, budget)
            runs.append((time.perf_counter() - started) / 200 * 1e3)
        print(f"  {name:14} {statistics.median(runs):.3f} ms")
    started = time.perf_counter()
    for _ in range(50):
        read_chat_request(body)
    reading = (time.perf_counter() - started) / 50 * 1e3
    print(f"  (reading those {len(request)} messages from the body: {reading:.3f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--window", type=int, default=0, help="resend only the last N messages (0: all)")
    parser.add_argument("--store", default=None, help="store URL (default: a temporary DuckDB file)")
    parser.add_argument("--plan", action="store_true", help="only time plan_history (no SDK, no server)")
    args = parser.parse_args()
    if args.plan:
        plan_costs(args.turns)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(args.turns, args.window, args.store or f"duckdb:///{Path(tmp) / 'bench.duckdb'}")


if __name__ == "__main__":
    main()
