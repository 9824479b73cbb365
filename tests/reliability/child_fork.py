"""A child app that forks after registering a client, as a pre-forking server does with its
app loaded before the fork (gunicorn's ``preload_app``, a celery prefork pool).

Arguments: store URL, base URL, tag. The parent makes a call, forks two processes that each
make three calls, try ``remember()`` and ``flush()``, and end normally (``sys.exit``: the
interpreter's exit runs there too); then the parent makes another call and prints what its
store holds.
"""

from __future__ import annotations

import os
import sys
import traceback

import httpx
import openai

import memtap

store_url, base_url, tag = sys.argv[1], sys.argv[2], sys.argv[3]
mem = memtap.Memory(store_url)
# No kept-alive connection: processes sharing one socket would read each other's answers
# (an HTTP client's own fork hazard, not memtap's).
http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
client = mem.register(
    openai.OpenAI(
        base_url=base_url, api_key="sk-test-0123456789abcdefghijkl", max_retries=0, http_client=http
    )
)


def say(line: str) -> None:
    """One line on stdout in one write (atomic on a pipe under 4 KB): the two forks print at
    the same time, and print() may write a line and its newline apart (unbuffered output)."""
    os.write(1, (line + "\n").encode())


def ask(entity: str, text: str) -> str:
    with mem.scope(entity_id=entity, session_id="s"):
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
    return reply.choices[0].message.content or ""


ask(f"parent-{tag}", "My cat is called Biscuit.")
assert mem.flush(30)
forks = []
for k in range(2):
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            for i in range(3):
                question = f"fork {k} turn {i}: what is my cat called?"
                answer = ask(f"fork{k}-{tag}", question)
                assert answer == f"You said: {question}", answer
            try:
                mem.remember("I like tea.", entity_id=f"fork{k}-{tag}")
                say(f"fork {k}: remember was allowed")
            except memtap.ForkedMemoryError as exc:
                say(f"fork {k} refused: {exc}")
            assert mem.flush(5)
            say(f"fork {k} done")
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.exit(status)
    forks.append(pid)
statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in forks]
print("forks", statuses, flush=True)
ask(f"parent-{tag}", "And my dog is called Rex.")
assert mem.flush(30)
counts = [len(mem.exchanges(entity_id=f"{who}-{tag}")) for who in ("parent", "fork0", "fork1")]
print("stored", counts, flush=True)
mem.close()
