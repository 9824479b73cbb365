"""``memtap demo``: memory carried from one run of an app to the next, fully offline.

A local scripted model server speaks the OpenAI API on 127.0.0.1; the real openai SDK talks
to it through a registered client. Run 1 tells the model two things and exits; run 2 is a
fresh process-like start (new Memory, new client) that asks about them, and the demo shows
the history memtap injected and what it stored.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from memtap.errors import install_hint
from memtap.longterm.recall_injector import RecallBudget
from memtap.memory import Memory, default_store_url
from memtap.redact import redact_url
from memtap.testing.server import Reply, ScriptedModelServer

RUN_1 = (
    ("Hi! I'm Alice and I live in Tokyo.", "Nice to meet you, Alice! Tokyo is a wonderful city."),
    ("I adopted a beagle called Mochi last week.", "Congratulations! Mochi is a lovely name for a beagle."),
)
RUN_2 = ("Where do I live, and what is my dog's name?", "You live in Tokyo, and your beagle is called Mochi.")
RUN_3 = (
    "Any ideas for a day out with my dog near where I live?",
    "Take Mochi to Yoyogi Park in Tokyo: beagles love it.",
)


def _openai() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            f"memtap demo drives the openai SDK: install it with {install_hint('memtap-openai')}, "
            f"or the defaults with {install_hint('memtap')}."
        ) from exc
    return openai


def _run(store: str, server: ScriptedModelServer, session: str, turns: Any, console: Console) -> Memory:
    openai = _openai()
    mem = Memory(store)
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-demo-key-never-stored-0000")
    mem.register(client)
    with mem.scope(entity_id="alice", session_id=session, process_id="memtap-demo"):
        for question, answer in turns:
            server.script(Reply(text=answer))
            response = client.chat.completions.create(
                model="demo-model", messages=[{"role": "user", "content": question}]
            )
            console.print(f"  [bold cyan]user[/]: {question}")
            console.print(f"  [bold green]model[/]: {response.choices[0].message.content}")
    return mem


def run_demo(store_url: str | None, console: Console) -> None:
    """Run the demo against ``store_url`` (default: the store every command and ``Memory()``
    open, so ``memtap sessions``, ``memtap ui`` and ``memtap recall`` show the demo's memory)."""
    store = store_url or default_store_url()
    session = "demo-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    with ScriptedModelServer() as server:
        console.print(
            Panel.fit(
                f"memtap demo: a local scripted model at {server.openai_base_url}\nstore: {redact_url(store)}"
            )
        )
        console.print(
            f"[bold]Run 1[/]: the app registers its openai client and chats (session [italic]{session}[/])."
        )
        _run(store, server, session, RUN_1, console).close()
        console.print("  (run 1 exits: memtap flushed the conversation to the store)\n")

        console.print(
            "[bold]Run 2[/]: a fresh start (new Memory, new client); the app sends only the new question."
        )
        server.clear()
        mem = _run(store, server, session, (RUN_2,), console)
        sent = server.last_json()["messages"]
        injected = len(sent) - 1
        table = Table(title="what the model received in run 2")
        table.add_column("#", justify="right")
        table.add_column("role")
        table.add_column("content")
        table.add_column("from")
        for i, m in enumerate(sent):
            table.add_row(
                str(i + 1), m["role"], str(m["content"]), "memtap history" if i < injected else "the app"
            )
        console.print(table)

        stored = mem.history(session, entity_id="alice")
        stats = mem.stats()
        mem.close()
        console.print(
            f"memtap injected {injected} earlier message(s) and stored {len(stored)} message(s) in this "
            f"session ({stats['exchanges']} exchange(s) in the store). The API key was never stored.\n"
        )
        _session_two(store, server, session + "-2", console)
    named = f" --store {redact_url(store)}" if store_url else ""  # else the default store
    console.print(
        f"See it again: [bold]memtap history {session}{named}[/], [bold]memtap sessions{named}[/], "
        f"[bold]memtap ui{named}[/] (with memtap-ui)"
    )


def _session_two(store: str, server: ScriptedModelServer, session: str, console: Console) -> None:
    """Run 3: a new session. No history to replay, but what alice said in session 1 is
    recalled (episodic memory, offline: no LLM extracts anything) and injected."""
    console.print(
        f"[bold]Run 3[/]: a new session ([italic]{session}[/]): no history to replay, but memtap "
        "recalls what alice said before."
    )
    server.clear()
    question, answer = RUN_3
    mem = Memory(store)
    # What the app's call will get, shown first, with the injector's own limits (this also
    # loads alice's recall index: a cold index is loaded in the background and skipped by
    # the call that found it cold).
    budget = RecallBudget()
    found = mem.recall(question, entity_id="alice", k=budget.k, min_score=budget.min_score)
    table = Table(title=f"memtap recall {question!r} --entity alice")
    table.add_column("score", justify="right")
    table.add_column("kind")
    table.add_column("fact")
    for hit in found:
        table.add_row(f"{hit.score:.3f}", hit.fact.kind, hit.text)
    console.print(table)
    client = _openai().OpenAI(base_url=server.openai_base_url, api_key="sk-demo-key-never-stored-0000")
    mem.register(client)
    with mem.scope(entity_id="alice", session_id=session, process_id="memtap-demo"):
        server.script(Reply(text=answer))
        response = client.chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": question}]
        )
    console.print(f"  [bold cyan]user[/]: {question}")
    console.print(f"  [bold green]model[/]: {response.choices[0].message.content}")
    mem.close()
    blocks = [m["content"] for m in server.last_json()["messages"] if m["role"] == "system"]
    if blocks:
        console.print(Panel(blocks[0], title="the memory block the model received (system message)"))
    console.print(f"memtap injected {len(blocks)} memory block(s) recalled from an earlier session.")
