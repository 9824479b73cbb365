"""Undoing an injection: what the upstream got, minus memtap's blocks, for the lossless tests.

Injected history carries the marker ``INJECTED-HISTORY`` and injected system text is inside
``<memtap-memory>``: removing exactly those must give back the client's body. A memory
element is found as a message or part of its own, appended to a text after a blank line,
or placed inside an agent's system text at an anchor (as a line of its own: the element
and the line break after it, or the line break before it)."""

from __future__ import annotations

import json
import re
from typing import Any

from memtap.protocol.model import Message
from memtap.protocol.wire import HistoryInjection, InjectionPlan, SystemBlock

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


ELEMENT = r"<memtap-memory>(?:(?!</memtap-memory>).)*</memtap-memory>"
_ONLY = re.compile(rf"{ELEMENT}(?:\n\n{ELEMENT})*", re.S)
_SUFFIX = re.compile(rf"(?:\n\n{ELEMENT})+\Z", re.S)
_ANCHORED = re.compile(ELEMENT, re.S)


def is_element(value: Any) -> bool:
    """Whether ``value`` is nothing but memtap elements."""
    return isinstance(value, str) and _ONLY.fullmatch(value) is not None


def _cut_text(text: str) -> str | None:
    """A text without the memtap elements appended to it or placed inside it (None: it
    was all memtap)."""
    if is_element(text):
        return None
    text = _SUFFIX.sub("", text)
    while (match := _ANCHORED.search(text)) is not None:
        start, end = match.span()
        # the element and the line break after it, else the one before it
        end, start = (end + 1, start) if text[end : end + 1] == "\n" else (end, start - 1)
        text = text[:start] + text[end:]
    return text


def _cut_content(content: Any) -> Any:
    """Message content without memtap's parts, appended text or placed elements."""
    if isinstance(content, str):
        kept = _cut_text(content)
        return "" if kept is None else kept
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and is_element(part.get("text")):
                continue
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                part = {**part, "text": _cut_text(part["text"])}
            out.append(part)
        return out
    return content


def _memtap_message(m: Any) -> bool:
    return isinstance(m, dict) and m.get("role") == "system" and is_element(m.get("content"))


def strip_chat(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    out["messages"] = [
        {**m, "content": _cut_content(m["content"])} if m.get("role") in ("system", "developer") else m
        for m in body["messages"]
        if not _injected(m) and not _memtap_message(m)
    ]
    return out


def strip_responses(body: dict[str, Any], original_input_was_str: bool) -> dict[str, Any]:
    out = dict(body)
    if isinstance(body.get("input"), list):
        items = [
            # a known agent's block may be placed inside one of its leading system items
            {**i, "content": _cut_content(i["content"])}
            if isinstance(i, dict) and i.get("role") in ("system", "developer") and "content" in i
            else i
            for i in body["input"]
            if not _injected(i) and not _memtap_message(i)
        ]
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
    out["messages"] = [
        {**m, "content": _cut_content(m["content"])} if m.get("role") in ("user", "system") else m
        for m in body["messages"]
        if not _injected(m)
    ]
    system = body.get("system")
    if isinstance(system, list):
        out["system"] = [
            {**b, "text": _cut_text(b["text"])} if isinstance(b.get("text"), str) else b
            for b in system
            if not (isinstance(b, dict) and is_element(b.get("text")))
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
