"""A child app for crash tests: registers an openai client, makes calls, then kills itself
with SIGKILL right after the last call returned (no atexit, no flush, no close)."""

from __future__ import annotations

import os
import signal
import sys

import openai

import memtap

store_url, base_url, calls, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
mem = memtap.Memory(store_url)
client = mem.register(
    openai.OpenAI(base_url=base_url, api_key="sk-test-0123456789abcdefghijkl", max_retries=0)
)
with mem.scope(entity_id=f"e-{tag}", session_id=f"s-{tag}"):
    for i in range(calls):
        if i % 4 == 3:
            for _ in client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"{tag} stream {i}"}], stream=True
            ):
                pass
        else:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"{tag} call {i}"}]
            )
print("calls done", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
