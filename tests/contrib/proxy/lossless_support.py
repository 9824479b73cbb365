"""Undoing an injection: what the upstream got, minus memtap's blocks, for the lossless tests.

Injected history carries the marker ``INJECTED-HISTORY`` and injected system text is inside
``<memtap-memory>``: removing exactly those must give back the client's body."""

from __future__ import annotations

import json
from typing import Any

from memtap.blocks import OPEN_TAG
from memtap.model import Message
from memtap.wire import HistoryInjection, InjectionPlan, SystemBlock

MARK = "INJECTED-HISTORY"


def ordered(value: Any) -> str:
    """Equality that sees key order and JSON types (1 vs 1.0, -0.0)."""
    return json.dumps(value, ensure_ascii=False)


def plan(history: int, stable: bool, volatile: bool) -> InjectionPlan:
    roles = ["user", "assistant"]
    messages = [Message(role=roles[i % 2], content=f"{MARK} {i} <b>&</b>") for i in range(history)]  # type: ignore[arg-type]
    blocks = []
    if stable:
        blocks.append(SystemBlock(text="stable fact", cache="session_init"))
    if volatile:
        blocks.append(SystemBlock(text="per-turn fact"))
    return InjectionPlan(history=messages, system_blocks=blocks)


def injections(history: int, stable: bool, volatile: bool) -> list[Any]:
    p = plan(history, stable, volatile)
    return [HistoryInjection(messages=p.history), *p.system_blocks]


def _injected(item: Any) -> bool:
    return MARK in json.dumps(item, ensure_ascii=False)


def _cut_text(text: str) -> str | None:
    """A system text without the memtap element appended to it (None: it was all memtap)."""
    if text.startswith(OPEN_TAG):
        return None
    head, _, _ = text.partition("\n\n" + OPEN_TAG)
    return head


def strip_chat(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    out["messages"] = [
        m
        for m in body["messages"]
        if not _injected(m)
        and not (m.get("role") == "system" and str(m.get("content", "")).startswith(OPEN_TAG))
    ]
    return out


def strip_responses(body: dict[str, Any], original_input_was_str: bool) -> dict[str, Any]:
    out = dict(body)
    if isinstance(body.get("input"), list):
        items = [i for i in body["input"] if not _injected(i)]
        if original_input_was_str and len(items) == 1:
            out["input"] = items[0]["content"]  # the documented str -> one-item list
        else:
            out["input"] = items
    if isinstance(body.get("instructions"), str):
        kept = _cut_text(body["instructions"])
        if kept is None:
            del out["instructions"]
        else:
            out["instructions"] = kept
    return out


def strip_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    out["messages"] = [m for m in body["messages"] if not _injected(m)]
    system = body.get("system")
    if isinstance(system, list):
        out["system"] = [
            b for b in system if not (isinstance(b, dict) and str(b.get("text", "")).startswith(OPEN_TAG))
        ]
    elif isinstance(system, str):
        kept = _cut_text(system)
        if kept is None:
            del out["system"]
        else:
            out["system"] = kept
    return out


def strip(protocol: str, body: dict[str, Any], original: dict[str, Any]) -> dict[str, Any]:
    if protocol == "openai.chat":
        return strip_chat(body)
    if protocol == "openai.responses":
        return strip_responses(body, isinstance(original.get("input"), str))
    return strip_anthropic(body)
