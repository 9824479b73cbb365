"""A child app for spool tests: registers an openai client, makes calls while its store
refuses every write (so all of them stay in the spool), then ends as asked:

    python child_spool.py STORE_URL BASE_URL CALLS kill|close

``kill``: SIGKILL right after the last call (a crash); ``close``: ``mem.close()`` and a
normal exit (a clean stop with calls still unstored)."""

from __future__ import annotations

import os
import signal
import sys

import openai

import memtap
from memtap.storage.store import StoreError
from memtap_duckdb.store import DuckDBStore
from memtap_postgres.store import PostgresStore

store_url, base_url, calls, ending = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


def down(*args: object, **kwargs: object) -> None:
    raise StoreError("store down (injected by the test)")


# Patched on the classes: the capture writer holds the bound method from the start.
DuckDBStore.write_exchanges = down  # type: ignore[method-assign,assignment]
PostgresStore.write_exchanges = down  # type: ignore[method-assign,assignment]
mem = memtap.Memory(store_url)
key = "sk-test-0123456789abcdefghijkl"
client = mem.register(openai.OpenAI(base_url=base_url, api_key=key, max_retries=0))
with mem.scope(entity_id="e-spool", session_id="s-spool"):
    for i in range(calls):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"spooled {i}"}])
print("calls done", flush=True)
if ending == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
mem.close(timeout=0.5)
print("closed", flush=True)
