"""Isolating the records a store refuses from the batch they came in (one piece of code
for captured calls and facts): the batch is split in halves until each failing record is
alone, so that the good ones are stored at once, in about 2·log2(n) writes per refused
record, and the refused one is never retried ahead of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from memtap.capture.quarantine import is_refusal

__all__ = ["halves", "isolate", "write_isolating"]

T = TypeVar("T")


def halves(part: list[T]) -> list[list[T]]:
    """``part`` in two halves (none for one record)."""
    if len(part) < 2:
        return []
    mid = len(part) // 2
    return [part[:mid], part[mid:]]


def isolate(
    part: list[T],
    exc: Exception,
    try_write: Callable[[list[T]], Exception | None],
    refused: list[tuple[T, Exception]],
    suspects: list[tuple[T, Exception]],
) -> None:
    """``part`` failed with ``exc`` while the store answers: split it, writing each half
    with ``try_write`` (which returns the error, or ``None`` when the half is stored), until
    each record that fails is alone; it goes to ``refused`` when its failure is a refusal
    (:func:`is_refusal`), else to ``suspects`` (the caller decides)."""
    if len(part) == 1:
        (refused if is_refusal(exc) else suspects).append((part[0], exc))
        return
    for half in halves(part):
        half_exc = try_write(half)
        if half_exc is not None:
            isolate(half, half_exc, try_write, refused, suspects)


def write_isolating(
    records: list[T], write: Callable[[list[T]], object]
) -> tuple[list[T], list[tuple[T, Exception]]]:
    """Write ``records`` with ``write`` (all or nothing per call); when the store refuses
    some of them, isolate those. Returns ``(stored, refused)``. A failure that is not a
    refusal is raised when nothing could be stored (the store may be down: the caller
    handles that as before); a record failing alone so while others were stored is
    refused too."""
    stored: list[T] = []

    def try_write(part: list[T]) -> Exception | None:
        try:
            write(part)
        except Exception as exc:
            return exc
        stored.extend(part)
        return None

    exc = try_write(records)
    if exc is None:
        return stored, []
    if not is_refusal(exc):
        raise exc
    refused: list[tuple[T, Exception]] = []
    suspects: list[tuple[T, Exception]] = []
    isolate(records, exc, try_write, refused, suspects)
    if suspects and not stored:
        raise suspects[0][1]
    return stored, refused + suspects
