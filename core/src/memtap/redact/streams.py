"""Redacting a stream's events, including a secret the stream cut across several events."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from memtap.protocol.json_encoder import compact_encoder
from memtap.redact.caches import _CLEAN_PIECES
from memtap.redact.detectors import MIN_SECRET_CHARS
from memtap.redact.scanner import REDACTED, _merge
from memtap.redact.structures import _SCALAR_TYPES, _spans_each
from memtap.redact.text import redact_text


def redact_stream(events: Sequence[str]) -> list[str]:
    """A stream's events (JSON texts, in order) with every secret removed, including one the
    stream cut across several events (:func:`redact_stream_events`). Events that change are
    encoded again; the others are returned as they were. A text that is not a JSON object
    or array is redacted on its own."""
    decoded: list[Any] = []
    for event in events:
        try:
            obj = json.loads(event)
        except ValueError:
            obj = None
        decoded.append(obj if type(obj) is dict or type(obj) is list else event)
    redacted = redact_stream_events(decoded)
    return [
        event if new is old else (new if type(new) is str else compact_encoder().encode(new))
        for event, old, new in zip(events, decoded, redacted)
    ]


def redact_stream_events(events: Sequence[Any], default: Callable[[Any], Any] | None = None) -> list[Any]:
    """A stream's decoded events (dicts or lists, in order) with every secret removed,
    including one the stream cut across several events: the strings found at the same place
    of successive events (``choices.0.delta.content``, ``delta.partial_json``...) are joined
    and scanned as one text, and each event keeps its part of the result.

    ``events`` are not changed: an event that holds a secret comes back as a redacted copy,
    the others as they are (an SDK's events are read again by the capture writer). An event
    that is a string is redacted as text; one holding objects that are not JSON types is
    first converted as :func:`json.dumps` with ``default`` would (``str`` when ``None``)."""
    objs = list(events)
    groups = _stream_texts(objs)
    if groups is None:  # rare: objects that are not JSON types, converted as the encoder will
        for index, event in enumerate(objs):
            if _stream_texts([event]) is None:
                objs[index] = json.loads(compact_encoder(default or str).encode(event))
        groups = _stream_texts(objs)
        assert groups is not None
    found = _stream_findings(groups)
    if found:
        # Rare: cut the secrets out of copies (their strings are gathered again, with the
        # places they are at).
        copies = [copy.deepcopy(e) for e in objs]
        copied = _stream_pieces(copies)
        changed: set[int] = set()
        for path, spans in found:
            _cut(copied[path], spans, copies, changed)
        objs = [copies[i] if i in changed else e for i, e in enumerate(objs)]
    return [redact_text(e) if type(e) is str else e for e in objs]


def _stream_texts(events: Sequence[Any]) -> dict[tuple[Any, ...], list[str]] | None:
    """The strings of ``events`` (decoded JSON; strings and numbers among them are left
    out) grouped by their place in an event, in order; ``None`` when an event is or holds an
    object that is not a JSON type. Gathered in a tree shaped like the events (a place's
    path is made once per place, not once per string: this runs on every stream)."""
    tree: dict[Any, list[Any]] = {}
    for obj in events:
        kind = type(obj)
        if kind is dict or kind is list:
            if not _event_texts(obj, tree):
                return None
        elif kind is not str and kind not in _SCALAR_TYPES:
            return None
    groups: dict[tuple[Any, ...], list[str]] = {}
    _flatten(tree, (), groups)
    return groups


def _event_texts(obj: Any, tree: dict[Any, list[Any]]) -> bool:
    """Add the strings of one event's dict or list to ``tree`` (``key -> [strings, subtree]``);
    ``False`` at an object that is not a JSON type."""
    for k, v in obj.items() if type(obj) is dict else enumerate(obj):
        kind = type(v)
        if kind is str:
            node = tree.get(k)
            if node is None:
                tree[k] = [[v], None]
            else:
                node[0].append(v)
        elif kind is dict or kind is list:
            node = tree.get(k)
            if node is None:
                tree[k] = node = [[], {}]
            elif node[1] is None:
                node[1] = {}
            if not _event_texts(v, node[1]):
                return False
        elif kind not in _SCALAR_TYPES:
            return False
    return True


def _flatten(
    tree: dict[Any, list[Any]], path: tuple[Any, ...], groups: dict[tuple[Any, ...], list[str]]
) -> None:
    for key, (texts, subtree) in tree.items():
        if texts:
            groups[(*path, key)] = texts
        if subtree:
            _flatten(subtree, (*path, key), groups)


def _stream_pieces(events: Sequence[Any]) -> dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]]:
    """The strings of ``events`` (decoded JSON, as :func:`redact_stream_events` has made
    them) as :func:`_stream_texts` groups them, each with where it is: ``(event index,
    parent, key, text)`` (to cut a secret out)."""
    pieces: dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]] = {}
    for index, obj in enumerate(events):
        kind = type(obj)
        if kind is dict or kind is list:
            _stream_leaves(obj, (), index, pieces)
    return pieces


def _stream_findings(
    groups: dict[tuple[Any, ...], list[str]],
) -> list[tuple[tuple[Any, ...], list[tuple[int, int]]]]:
    """Where secrets are among a stream's strings (``groups``: by place, in order): per
    place, the spans (offsets in its strings joined). Each place's strings are scanned
    joined (a secret the stream cut) and each alone (joining may glue a word to a key's
    start; a string that recurs, an id in every event, alone once), all of them in one scan.
    """
    texts: list[str] = []
    plan: list[tuple[tuple[Any, ...], tuple[str, ...], int, dict[str, int] | None]] = []
    for path, group in groups.items():
        pieces = tuple(group)
        if pieces in _CLEAN_PIECES:
            continue
        joined = "".join(pieces)
        if len(joined) < MIN_SECRET_CHARS:
            continue
        at = len(texts)
        texts.append(joined)
        alone: dict[str, int] | None = None
        if len(pieces) > 1:
            alone = {}
            for piece in pieces:
                if len(piece) >= MIN_SECRET_CHARS and piece not in alone:
                    alone[piece] = len(texts)
                    texts.append(piece)
        plan.append((path, pieces, at, alone))
    if not texts:
        return []
    hits = _spans_each(texts)
    found_at = []
    for path, pieces, at, alone in plan:
        found = list(hits.get(at, ()))
        if alone:
            offset = 0
            for piece in pieces:
                index = alone.get(piece)
                if index is not None and index in hits:
                    found += [(a + offset, b + offset, name) for a, b, name in hits[index]]
                offset += len(piece)
        if found:
            found_at.append((path, _merge(found)))
        else:
            _CLEAN_PIECES.add(pieces)
    return found_at


def _stream_leaves(
    obj: Any,
    path: tuple[Any, ...],
    index: int,
    pieces: dict[tuple[Any, ...], list[tuple[int, Any, Any, str]]],
) -> None:
    """Add the strings of ``obj`` (an event's dict or list, at ``path``) to ``pieces``, by
    their path. The values of decoded JSON are exactly str, dict, list or a scalar (numbers,
    true, null are no secret's place and are passed over without a path being made for
    them)."""
    for k, v in obj.items() if type(obj) is dict else enumerate(obj):
        kind = type(v)
        if kind is str:
            at = (*path, k)
            group = pieces.get(at)
            if group is None:
                pieces[at] = [(index, obj, k, v)]
            else:
                group.append((index, obj, k, v))
        elif kind is dict or kind is list:
            _stream_leaves(v, (*path, k), index, pieces)


def _cut(
    group: list[tuple[int, Any, Any, str]],
    spans: list[tuple[int, int]],
    decoded: list[Any],
    changed: set[int],
) -> None:
    """Remove ``spans`` (offsets in the joined pieces) from the pieces: the piece where a
    span starts gets :data:`REDACTED`, the rest of the span is dropped."""
    offset = 0
    for index, parent, key, text in group:
        start, end = offset, offset + len(text)
        offset = end
        parts = []
        last = start
        for a, b in spans:
            if b <= start or a >= end:
                continue
            parts.append(text[last - start : max(a, start) - start])
            if a >= start:
                parts.append(REDACTED)
            last = min(b, end)
        if not parts:
            continue
        parts.append(text[last - start :])
        parent[key] = "".join(parts)
        changed.add(index)
