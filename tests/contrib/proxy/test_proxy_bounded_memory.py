"""A long-running proxy keeps a bounded number of finished calls in memory (the in-process
suite is ``tests/reliability/test_bounded_memory.py``): Claude Code's recorded request, a
new prompt each turn (the agent keeps its own history: memtap injects none, and counts what
it resends where the call is formatted), and an SDK client resending its conversation
(history injected). Each call reachable from the next kept every call of the session
alive."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import httpx
import openai
from proxy_support import API_KEY, needs_anthropic, settle

import memtap
from memtap.request.tap import Call
from memtap.testing.garbage import collect_garbage
from memtap.testing.server import ScriptedModelServer
from memtap.testing.timing import eventually
from memtap_proxy import Proxy, ProxyConfig, ProxyThread

CALLS = 120
MAX_ALIVE = 30
GOLDEN = Path(__file__).parent / "golden"
PROMPT = "Read notes.txt and tell me what it says."


def _stored(mem: memtap.Memory) -> int:
    return sum(s.exchange_count for s in mem.sessions(entity_id=None, limit=10 * CALLS))


def _alive_calls() -> int:
    collect_garbage()
    return sum(1 for o in gc.get_objects() if isinstance(o, Call))


@needs_anthropic
def test_claude_code_turns_are_not_kept(upstream: ScriptedModelServer, mem: memtap.Memory) -> None:
    headers = json.loads((GOLDEN / "claude_code_first.headers.json").read_text())
    raw = (GOLDEN / "claude_code_first.json").read_bytes()
    config = ProxyConfig(openai_upstream=upstream.base_url, anthropic_upstream=upstream.base_url)
    with ProxyThread(Proxy(config, mem)) as proxy:
        for turn in range(CALLS):
            body = raw.replace(PROMPT.encode(), f"{PROMPT} Turn {turn}.".encode())
            r = httpx.post(proxy.url + "/v1/messages", content=body, headers=headers, timeout=10)
            assert r.status_code == 200, r.text
        # The last stream is captured once its last byte is sent (the client may be done first).
        eventually(lambda: mem.flush(60) and _stored(mem) >= CALLS, 10)
        stored = _stored(mem)
        alive = _alive_calls()
    assert stored == CALLS
    assert alive <= MAX_ALIVE, f"{alive} of {CALLS} finished calls are still in memory"


def test_a_resending_client_s_turns_are_not_kept(proxy: ProxyThread, mem: memtap.Memory) -> None:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=API_KEY, max_retries=0)
    conversation: list[dict[str, str]] = []
    for turn in range(CALLS):
        conversation.append({"role": "user", "content": f"question {turn}"})
        reply = client.chat.completions.create(model="m", messages=conversation[-6:])
        conversation.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
    settle(mem, CALLS)
    alive = _alive_calls()
    assert alive <= MAX_ALIVE, f"{alive} of {CALLS} finished calls are still in memory"
