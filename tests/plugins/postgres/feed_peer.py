"""One process of the change-feed tests: a memtap.Memory on a PostgreSQL store, driven by
JSON commands on stdin (one per line), answering one JSON line each.

Commands: ``remember``/``forget``/``capture`` (answer ``done_at``, this machine's monotonic
clock, shared by its processes), ``recall``/``history`` (what the request path sees now),
``wait_recall``/``wait_history`` (poll the request path until the text is there, or gone:
answer ``seen_at``), ``feed`` (the listener's backend pid and connection count).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import memtap
from memtap.protocol.model import Attribution

#: The recall deadline of a request path.
DEADLINE = 0.05


def recalled(mem: memtap.Memory, query: str, entity: str) -> list[str]:
    return [s.fact.text for s in mem.recall(query, entity_id=entity, deadline=DEADLINE)]


def history(mem: memtap.Memory, entity: str, session: str) -> list[str]:
    attribution = Attribution(entity_id=entity, session_id=session)
    return [str(m.content) for m in mem.histories.get(attribution)]


def wait(seen: Any, present: bool, timeout: float) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if bool(seen()) == present:
            return {"seen_at": time.monotonic()}
        time.sleep(0.005)
    return {"seen_at": None}


def main() -> None:
    mem = memtap.Memory(sys.argv[1], embedder=False, spool=False)
    feed = mem.store.feed  # type: ignore[attr-defined]
    feed.listening.wait(10)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op, out = cmd["op"], {}
        if op == "remember":
            mem.remember(cmd["text"], entity_id=cmd["entity"])
            out = {"done_at": time.monotonic()}
        elif op == "forget":
            mem.forget(entity_id=cmd["entity"])
            out = {"done_at": time.monotonic()}
        elif op == "capture":
            mem.capture(
                [memtap.Message(role="user", content=cmd["text"])],
                [memtap.Message(role="assistant", content="noted")],
                entity_id=cmd["entity"],
                session_id=cmd["session"],
            )
            mem.flush()
            out = {"done_at": time.monotonic()}
        elif op == "recall":
            mem.recall(cmd["query"], entity_id=cmd["entity"])  # loads the index (no deadline)
            out = {"texts": recalled(mem, cmd["query"], cmd["entity"])}
        elif op == "history":
            mem.histories.get(Attribution(entity_id=cmd["entity"], session_id=cmd["session"]))
            time.sleep(0.3)  # the first read of the session, in the background
            out = {"texts": history(mem, cmd["entity"], cmd["session"])}
        elif op == "wait_recall":
            out = wait(
                lambda c=cmd: c["text"] in recalled(mem, c["query"], c["entity"]),
                cmd["present"],
                cmd["timeout"],
            )
        elif op == "wait_history":
            out = wait(
                lambda c=cmd: c["text"] in history(mem, c["entity"], c["session"]),
                cmd["present"],
                cmd["timeout"],
            )
        elif op == "feed":
            out = {
                "pid": feed.backend_pid,
                "connections": feed.connections,
                "listening": feed.listening.is_set(),
            }
        elif op == "quit":
            break
        print(json.dumps(out), flush=True)
    mem.close()


if __name__ == "__main__":
    main()
