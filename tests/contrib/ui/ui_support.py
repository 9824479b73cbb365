"""A real store for the UI's tests, screenshots and docs: a DuckDB file filled by the openai
SDK, registered with memtap, against the local scripted model server (history and recalled
facts injected into later calls), plus facts remembered and replaced, and hostile text."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import httpx
import openai

import memtap
from memtap.testing.server import Reply, ScriptedModelServer
from memtap.testing.timing import eventually

#: Text that must show as text on every page.
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
#: Seconds (before :func:`~memtap.testing.timing.slack`) a test asks the recall page again
#: while it says the entity is still loading (a busy CI machine's first load of an index
#: may take longer than the page's wait).
LOADING_PATIENCE = 20.0
#: What the recall page says while the entity's index loads.
LOADING_TEXT = "are still being loaded for recall"
#: When the story happens (fixed, so that screenshots do not change from run to run).
T0 = _dt.datetime(2026, 11, 30, 9, 0, tzinfo=_dt.timezone.utc)


def fill(store_url: str, *, embedder: object = False) -> None:
    """Fill ``store_url`` with two entities' sessions, captured calls and facts."""
    with ScriptedModelServer() as server:
        # Two facts a call at most: recall leaves the others out ("limit"), which the UI shows.
        budget = memtap.RecallBudget(k=2)
        mem = memtap.Memory(store_url, spool=False, embedder=embedder, recall=budget)  # type: ignore[arg-type]
        try:
            client = mem.register(
                openai.OpenAI(base_url=server.openai_base_url, api_key="sk-ui-test-0000000000")
            )

            def say(text: str, reply: str) -> None:
                server.script(Reply(text=reply))
                client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": text}])
                mem.flush()

            with mem.scope(entity_id="alice", session_id="monday", process_id="support-bot"):
                say("I adopted a beagle called Miso last week.", "Congratulations on Miso!")
                say("I live in Osaka, near the castle.", "Osaka is lovely.")
                say(f"Please keep this snippet: {HOSTILE}", "Kept it, as text.")
            mem.recall("beagle", entity_id="alice")  # the index is loaded (a call never waits for it)
            with mem.scope(entity_id="alice", session_id="tuesday", process_id="support-bot"):
                say("What should I feed Miso, my beagle?", "A beagle like Miso does well on measured kibble.")
            with mem.scope(entity_id="bob", session_id="b1"):
                say("I am allergic to peanuts.", "Noted: no peanuts.")
            mem.remember("Alice prefers green tea", entity_id="alice", at=T0)
            mem.handle_memory_tool({"fact": "Alice lives in Osaka"}, entity_id="alice")
            mem.handle_memory_tool(
                {"fact": "Alice lives in Kyoto", "replaces": "Alice lives in Osaka"}, entity_id="alice"
            )
            mem.remember(f"Alice's snippet: {HOSTILE}", entity_id="alice", at=T0)
            mem.flush()
        finally:
            mem.close()


def recall_page(client: Any, path: str, **params: str) -> httpx.Response:
    """The recall page ``path`` once the entity's index is loaded: asked again while it says
    the facts are still being loaded, as it tells a person to (``format=json``: its
    ``loading``)."""
    pages: list[httpx.Response] = []

    def loaded() -> bool:
        pages.append(client.get(path, params=params))
        page = pages[-1]
        if page.status_code != 200:
            return True
        return not (page.json()["loading"] if params.get("format") == "json" else LOADING_TEXT in page.text)

    assert eventually(loaded, LOADING_PATIENCE, interval=0.2), f"{path} still loading after {len(pages)} asks"
    return pages[-1]
