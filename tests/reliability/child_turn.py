"""A child app for the episode durability tests: says a turn through a registered openai
client, prints ``said``, then waits to be killed (the test sends SIGKILL).

Arguments: store URL, base URL, tag, a mode, and the spool directory (its segments are
sealed after 1 KiB: each call starts a new one, and a segment whose calls are all done is
deleted at once). Modes: ``turn`` (episodes made offline, as by default) or ``stuck``
(memorize has an LLM port that never answers, and prints ``memorizing`` when asked: the
turn is stored, memorizing it never ends; a second turn follows it, sealing its segment).
"""

from __future__ import annotations

import sys
import threading

import openai

import memtap
from memtap.capture.spool import Spool

store_url, base_url, tag, mode, spool_dir = sys.argv[1:6]
asked = threading.Event()


class NeverAnswers:
    """An LLM port stuck for good (a hung model server)."""

    def complete(self, prompt: str) -> str:
        asked.set()
        print("memorizing", flush=True)
        threading.Event().wait()
        raise AssertionError("unreachable")


mem = memtap.Memory(
    store_url,
    llm=NeverAnswers() if mode == "stuck" else None,
    embedder=False,
    spool=Spool(spool_dir, segment_bytes=1024),
)
client = mem.register(
    openai.OpenAI(base_url=base_url, api_key="sk-test-0123456789abcdefghijkl", max_retries=0)
)
#: Makes the first call's spool record longer than a segment: the next call seals it.
SYSTEM = "You are a helpful assistant who answers briefly. " * 30
with mem.scope(entity_id=f"e-{tag}", session_id=f"s-{tag}"):
    client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "My favourite colour is teal."},
        ],
    )
    if mode == "stuck":
        assert asked.wait(60), "memorize never started"
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "I live in Lyon."}])
print("said", flush=True)
threading.Event().wait()  # until killed
