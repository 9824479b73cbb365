"""How ``memtap explain`` shows an explanation in a terminal (rich), and a session's
captured calls with what was injected into each."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from memtap.protocol.model import Exchange, ExplainedFact, Explanation, InjectedBlock

#: The score parts shown as columns, in this order (others follow).
PART_COLUMNS = ("words", "vector", "role", "present", "time", "recency", "moved")
#: Put before the text of a fact a newer statement about the same thing ranks above.
SUPERSEDED = "(superseded by a newer statement) "


def _first_user_text(exchange: Exchange, width: int = 60) -> str:
    for m in exchange.input:
        if m.role == "user" and m.content.strip():
            text = " ".join(m.content.split())
            return text if len(text) <= width else text[: width - 1] + "…"
    return ""


def summary(exchange: Exchange) -> str:
    """What was injected into a call, in a few words (``"3 turns, 2 facts"``)."""
    turns = sum(len(b.turns) for b in exchange.injected)
    facts = sum(len(b.facts) for b in exchange.injected)
    others = [b.kind for b in exchange.injected if b.kind not in ("history", "recall")]
    said = []
    if turns:
        said.append(f"{turns} turn{'s' * (turns != 1)}")
    if facts:
        said.append(f"{facts} fact{'s' * (facts != 1)}")
    said.extend(others)
    return ", ".join(said) or "nothing"


def exchanges_table(exchanges: Sequence[Exchange], title: str) -> Table:
    """One row per captured call: its id, time, the user's words, what was injected."""
    table = Table(title=title)
    for col in ("exchange", "started (UTC)", "user said", "injected"):
        table.add_column(col, overflow="fold")
    for ex in exchanges:
        table.add_row(
            Text(ex.id),
            ex.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            Text(_first_user_text(ex)),
            summary(ex),
        )
    return table


def _parts_columns(facts: Sequence[ExplainedFact]) -> list[str]:
    seen = {k for f in facts for k in f.parts}
    return [c for c in PART_COLUMNS if c in seen]


def _facts_table(facts: Sequence[ExplainedFact], title: str, *, reasons: bool) -> Table:
    table = Table(title=title, title_justify="left")
    if reasons:
        table.add_column("reason")
    table.add_column("score", justify="right")
    parts = _parts_columns(facts)
    for part in parts:
        table.add_column(part, justify="right")
    table.add_column("fact id")
    table.add_column("text", overflow="fold")
    for f in facts:
        row: list[RenderableType] = [f.reason or ""] if reasons else []
        row.append(f"{f.score:.3f}")
        row.extend(f"{f.parts[p]:.3f}" if p in f.parts else "-" for p in parts)
        text = SUPERSEDED + f.text if f.parts.get("superseded") else f.text
        row.extend([Text(f.fact_id), Text(text)])
        table.add_row(*row)
    return table


def _block(block: InjectedBlock) -> RenderableType:
    parts: list[RenderableType] = []
    if block.turns:
        for m in block.turns:
            line = Text.assemble((m.role, "bold"), ": ", m.content)
            for call in m.tool_calls:
                line.append(f"\n  -> {call.name}({call.arguments})")
            if m.exchange_id:
                line.append(f"   (exchange {m.exchange_id})", style="dim")
            parts.append(line)
    if block.facts:
        parts.append(_facts_table(block.facts, "injected facts", reasons=False))
    if block.left_out:
        parts.append(_facts_table(block.left_out, "considered, left out", reasons=True))
    if block.kind != "history":
        parts.append(
            Panel(Text(block.text), title="text as injected", title_align="left", border_style="dim")
        )
    head = block.kind
    if block.turns:
        head += f": {len(block.turns)} turn{'s' * (len(block.turns) != 1)}"
    if block.facts or block.left_out:
        head += f": {len(block.facts)} fact(s) injected, {len(block.left_out)} left out"
    return Panel(Group(*parts), title=escape(head), title_align="left")


def render(explanation: Explanation, console: Console) -> None:
    """Print an explanation: the call, then each injected block."""
    ex = explanation.exchange
    a = ex.attribution
    model = ex.request_model or ex.response_model or "-"
    console.print(
        Text.assemble(
            ("exchange ", "bold"),
            ex.id,
            f"  entity {a.entity_id}  session {a.session_id}  {ex.provider} {ex.operation} {model}  "
            f"{ex.started_at:%Y-%m-%d %H:%M:%S} UTC  {ex.status}",
        ),
        soft_wrap=True,
    )
    for m in ex.messages:
        console.print(m, soft_wrap=True)
    if not explanation.blocks:
        console.print("memtap injected nothing into this call (or it was captured before this was recorded)")
        return
    for block in explanation.blocks:
        console.print(_block(block))
