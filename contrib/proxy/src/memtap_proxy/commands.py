"""``mem:`` in-band commands: typed as the latest user message, answered by the proxy
itself (no upstream call, no tokens spent, nothing captured).

A command acts only as the request's entity, which the proxy has checked against the
request's token before it runs (:meth:`memtap_proxy.guard.Guard.bind`); what concerns the
whole proxy (the store, recall counters over every entity) is shown only to requests whose
token may act as every entity."""

from __future__ import annotations

import attrs

from memtap import Memory
from memtap.sdk import Attribution, RequestView

PREFIX = "mem:"
HELP = """memtap commands (answered by the local memtap proxy, never sent to the model):
  mem:help             this help
  mem:status           store, attribution and what memtap holds for you
  mem:recall <query>   the remembered facts that best match <query>
  mem:forget           delete everything remembered about you (asks to confirm)
  mem:forget --yes     delete it now"""


@attrs.frozen
class Command:
    """A parsed ``mem:`` command."""

    name: str
    argument: str = ""


def parse_command(view: RequestView) -> Command | None:
    """The command in the request's latest user message, if that message is one."""
    messages = view.messages
    if not messages or messages[-1].role != "user":
        return None
    text = messages[-1].content.strip()
    if not text.lower().startswith(PREFIX):
        return None
    name, _, argument = text[len(PREFIX) :].strip().partition(" ")
    return Command(name=name.strip().lower(), argument=argument.strip())


@attrs.frozen
class CommandContext:
    """What a command may read: the memory, the caller's attribution, the route, and
    whether the caller may see the whole proxy (``every_entity``: no token, or ``--token``)."""

    memory: Memory
    attribution: Attribution
    protocol: str
    agent: str
    every_entity: bool = True
    session_source: str = "header"


def run_command(command: Command, ctx: CommandContext) -> str:
    """The text answering ``command`` (blocking: store calls; run it off the event loop)."""
    entity = ctx.attribution.entity_id
    if command.name == "recall":
        if not command.argument:
            return "usage: mem:recall <query>"
        found = ctx.memory.recall(command.argument, entity_id=entity, k=10)
        if not found:
            return f"memtap remembers nothing about {command.argument!r} for {entity!r}."
        lines = [f"{i}. {s.text}  (score {s.score:.2f})" for i, s in enumerate(found, 1)]
        return f"memtap recalls for {entity!r}:\n" + "\n".join(lines)
    if command.name == "forget":
        if command.argument != "--yes":
            return (
                f"This deletes every session, message and fact memtap keeps for {entity!r}. "
                f"Send `mem:forget --yes` to do it."
            )
        count = ctx.memory.forget(entity_id=entity)
        return f"memtap deleted {count} record(s) of {entity!r}."
    if command.name == "status":
        a = ctx.attribution
        facts = len(ctx.memory.facts(entity_id=entity))
        sessions = len(ctx.memory.sessions(entity_id=entity))
        mine = (
            f"entity {a.entity_id!r}, session {a.session_id!r} ({_SOURCES[ctx.session_source]}), "
            f"process {a.process_id or '-'}\n"
            f"protocol {ctx.protocol}, agent profile {ctx.agent}\n"
            f"{facts} fact(s) and {sessions} session(s) stored for {entity!r}"
        )
        if not ctx.every_entity:  # a token bound to entities sees nothing of the others
            return f"memtap proxy\n{mine}"
        return f"memtap proxy: store {ctx.memory.url}\n{mine}\n{_recall_status(ctx.memory)}"
    if command.name == "help":
        return HELP
    return f"unknown memtap command `mem:{command.name}`.\n\n{HELP}"


#: How ``mem:status`` says where the session came from.
_SOURCES = {
    "header": "from x-memtap-session",
    "agent": "named by the agent",
    "config": "from --session",
    "derived": "derived from the conversation",
}


def _recall_status(memory: Memory) -> str:
    """One line of recall counters since the proxy started."""
    st = memory.recall_stats()
    embedder = memory.embedder.name if memory.embedder is not None else "none (words only)"
    return (
        f"recall since start: {st.searches} search(es), {st.quick_queries} with a quick query "
        f"vector ({st.escalations} asked the full model too), {st.lexical_only} words only, "
        f"{st.cold_skips} skipped while loading, {st.busy_skips} while a background change "
        f"held the index ({st.index_waits} waited for it, {st.index_wait_seconds * 1e3:.1f} ms "
        f"in all); embedder {embedder}, "
        f"{st.facts_embedded} fact(s) embedded"
    )
