"""Observing botocore ``EventStream`` objects without changing them.

The stream keeps its type (:mod:`memtap.adapters.streamtap`): its class is swapped for a cached
subclass whose ``__iter__`` reports each parsed event to the call and whose ``close``
reports an early end. A ``for`` loop that breaks drops the generator, which reports a
partial answer at once; a stream never iterated is reported when it is garbage-collected.
The call is finalised exactly once, whatever comes first.
"""

from __future__ import annotations

from typing import Any

from memtap.sdk import Call, JsonFn, StreamTap, early_end_subclass, retype


def tap_event_stream(stream: Any, call: Call, to_json: JsonFn) -> None:
    """Make the ``EventStream`` ``stream`` report to ``call``, its events unchanged."""
    retype(stream, StreamTap(call, to_json), _make_tapped_class)


def _make_tapped_class(cls: Any) -> type:
    return early_end_subclass(cls, items=lambda self: self._memtap_tap.iterate(cls.__iter__(self)))
