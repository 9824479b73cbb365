"""``memtap.sdk.StreamTap``: the one observer of streamed answers.

Every item is recorded and shown as the app would have got it (memtap's usage event
hidden); the call is finalised once, whatever comes first (the end, an error, an early
close, the stream collected unread); memtap's failures never reach the app. Used through
``iterate`` / ``aiterate`` (a generator the adapter can replace) and ``retype`` (a stream of
the SDK's own class).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from kit_support import KIT, KitPlugin, event_json

import memtap
from memtap.sdk import Call, StreamTap, retype, subclass_of
from memtap.testing.garbage import collect_garbage

BODY = {"model": "kit-1", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def chunk(text: str) -> dict[str, Any]:
    return {"model": "kit-1", "choices": [{"index": 0, "delta": {"content": text}}]}


USAGE = {"model": "kit-1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
EVENTS = [chunk("Hel"), chunk("lo"), USAGE]


# Own mem: the kit plugin, and the spool on (a captured stream goes through the journal as shipped).
@pytest.fixture
def mem() -> Iterator[memtap.Memory]:
    memory = memtap.Memory("memory://", plugins=[KitPlugin()], entry_points=False)
    yield memory
    memory.close()


def prepared_call(mem: memtap.Memory) -> Call:
    """A streamed call whose body memtap prepared: it asked for usage (the last event)."""
    call = mem.tap.begin(KIT, fallback_body=BODY)
    with mem.scope(session_id="s"):
        call.prepare(BODY)
    assert call.hide_usage_event
    return call


def exchanges(mem: memtap.Memory) -> list[Any]:
    mem.flush()
    return list(mem.store.exchanges())


def test_the_usage_event_memtap_asked_for_is_hidden_and_recorded(mem):
    tap = StreamTap(prepared_call(mem), event_json)
    assert list(tap.iterate(iter(EVENTS))) == EVENTS[:2]
    (exchange,) = exchanges(mem)
    assert exchange.status == "ok" and exchange.usage.input_tokens == 3
    assert [m.content for m in exchange.output] == ["Hello"]


def test_an_event_filter_shows_items_as_the_app_would_have_got_them(mem):
    def without_usage(event: dict[str, Any]) -> dict[str, Any] | None:
        return None if event is USAGE else {**event, "seen": True}

    tap = StreamTap(prepared_call(mem), event_json, without_usage)
    assert list(tap.iterate(iter(EVENTS))) == [{**e, "seen": True} for e in EVENTS[:2]]


def test_items_are_shown_as_they_are_when_memtap_asked_for_nothing(mem):
    call = mem.tap.begin(KIT, fallback_body=BODY)
    call.prepare({**BODY, "stream_options": {"include_usage": True}})  # the app asked itself
    assert not call.hide_usage_event
    assert list(StreamTap(call, event_json).iterate(iter(EVENTS))) == EVENTS


def test_a_failing_filter_shows_the_item_unchanged(mem, caplog):
    def broken(event: Any) -> Any:
        raise RuntimeError("memtap bug")

    tap = StreamTap(prepared_call(mem), event_json, broken)
    with caplog.at_level(logging.ERROR, logger="memtap.streams"):
        assert list(tap.iterate(iter(EVENTS))) == EVENTS
    assert "could not observe an item of a kit.chat stream" in caplog.text


def test_the_call_is_finished_once(mem):
    tap = StreamTap(prepared_call(mem), event_json)
    tap.observe(EVENTS[0])
    tap.finish(partial=True)
    tap.finish()
    tap.finish(error=RuntimeError("late"))
    (exchange,) = exchanges(mem)
    assert exchange.status == "partial"


def test_closing_early_finishes_partial_and_closes_the_source(mem):
    closed = []

    def source() -> Iterator[Any]:
        try:
            yield from EVENTS
        finally:
            closed.append(True)

    items = StreamTap(prepared_call(mem), event_json).iterate(source())
    assert next(items) == EVENTS[0]
    items.close()
    assert closed == [True]
    (exchange,) = exchanges(mem)
    assert exchange.status == "partial"


def test_an_error_of_the_stream_is_reraised_as_the_same_object_and_recorded(mem):
    error = ConnectionError("reset")

    async def source() -> Any:
        yield EVENTS[0]
        raise error

    async def read() -> list[Any]:
        return [item async for item in StreamTap(prepared_call(mem), event_json).aiterate(source())]

    with pytest.raises(ConnectionError) as raised:
        asyncio.run(read())
    assert raised.value is error
    (exchange,) = exchanges(mem)
    assert exchange.status == "error" and "reset" in (exchange.error or "")


class SdkStream:
    """A stream of an SDK's own class."""

    def __init__(self, items: list[Any]) -> None:
        self.items = iter(items)

    def __iter__(self) -> Iterator[Any]:
        return self.items


def _observing(cls: Any) -> type:
    def __iter__(self: Any) -> Iterator[Any]:
        return self._memtap_tap.iterate(cls.__iter__(self))

    return subclass_of(cls, {"__iter__": __iter__})


def test_retype_keeps_the_streams_type_and_reports_to_the_tap(mem):
    stream = SdkStream(EVENTS)
    retype(stream, StreamTap(prepared_call(mem), event_json), _observing)
    assert isinstance(stream, SdkStream) and type(stream) is not SdkStream
    assert (type(stream).__name__, type(stream).__qualname__) == ("SdkStream", SdkStream.__qualname__)
    assert list(stream) == EVENTS[:2]
    other = SdkStream([])
    retype(other, StreamTap(mem.tap.begin(KIT), event_json), _observing)
    assert type(other) is type(stream)  # made once per class and maker
    (exchange,) = exchanges(mem)
    assert exchange.status == "ok"


@pytest.mark.parametrize(
    "when_collected",
    # Without a finalizer nothing reports a stream dropped unread: its call stays in flight.
    [True, pytest.param(False, marks=pytest.mark.leaves_call_in_flight)],
)
def test_a_stream_collected_unread(mem, when_collected):
    stream = SdkStream(EVENTS)
    tap = StreamTap(prepared_call(mem), event_json)
    retype(stream, tap, _observing, finish_when_collected=when_collected)
    del stream
    collect_garbage()
    assert tap.done is when_collected
    assert [e.status for e in exchanges(mem)] == (["partial"] if when_collected else [])
