"""A child app for crash tests: registers an openai client, makes calls, then kills itself
right after the last call returned (no atexit, no flush, no close).

Arguments: store URL, base URL, number of calls, tag, and optionally a mode: ``kill`` (the
default: SIGKILL at once), ``flush-kill`` or ``flush-term`` (wait until the calls are stored
and memorized, print the fact count, then SIGKILL or SIGTERM, whose default action ends the
process as abruptly), ``exit`` (end normally: the interpreter's exit closes the Memory) or
``exit-now`` (``close()`` with no time to wait, then end normally). Modes other than ``kill``
send statements, which become episode facts.
"""

from __future__ import annotations

import os
import signal
import sys

import openai

import memtap

store_url, base_url, calls, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mode = sys.argv[5] if len(sys.argv) > 5 else "kill"
mem = memtap.Memory(store_url)
client = mem.register(
    openai.OpenAI(base_url=base_url, api_key="sk-test-0123456789abcdefghijkl", max_retries=0)
)


def text(kind: str, i: int) -> str:
    if mode == "kill":
        return f"{tag} {kind} {i}"
    return f"My {tag} garden plant number {i} loves sunny windows ({kind})"


with mem.scope(entity_id=f"e-{tag}", session_id=f"s-{tag}"):
    for i in range(calls):
        if i % 4 == 3:
            for _ in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text("stream", i)}], stream=True
            ):
                pass
        else:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": text("call", i)}])
print("calls done", flush=True)
if mode.startswith("exit"):
    if mode == "exit-now":
        mem.close(0.0)
    sys.exit(0)
if mode != "kill":
    mem.flush(30)
    print("facts", len(mem.facts(entity_id=f"e-{tag}")), flush=True)
os.kill(os.getpid(), signal.SIGTERM if mode == "flush-term" else signal.SIGKILL)
