from __future__ import annotations

import datetime as dt
import json

import attrs
import cattrs
import pytest

from memtap.protocol.model import (
    Attribution,
    Exchange,
    Fact,
    Message,
    ScoredFact,
    SessionInfo,
    ToolCall,
    Usage,
    from_dict,
    to_dict,
)

TOKYO = dt.timezone(dt.timedelta(hours=9))


def rich_exchange() -> Exchange:
    return Exchange(
        attribution=Attribution(entity_id="alice", session_id="s1", process_id="support-bot"),
        provider="openai",
        operation="chat",
        input=[
            Message(role="user", content="What's the weather in Paris?", name="alice"),
            Message(role="tool", content='{"temp": 21}', tool_call_id="call_0"),
        ],
        output=[
            Message(
                role="assistant",
                content="",
                tool_calls=[
                    ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris", "unit":"C"}'),
                    ToolCall(id="call_2", name="get_time", arguments="", type="function"),
                ],
            )
        ],
        system="You are helpful.",
        request_model="gpt-x",
        response_model="gpt-x-2025",
        usage=Usage(input_tokens=120, output_tokens=30, cached_input_tokens=64),
        finish_reasons=["tool_calls"],
        stream=True,
        status="partial",
        error="ConnectionError: reset",
        started_at=dt.datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=dt.timezone.utc),
        ended_at=dt.datetime(2025, 3, 4, 14, 6, 8, tzinfo=TOKYO),
        metadata={"tenant": "acme", "trace": "abc"},
        id="ex-1",
    )


def test_exchange_round_trips_through_dicts():
    exchange = rich_exchange()
    assert from_dict(to_dict(exchange), Exchange) == exchange


def test_exchange_round_trips_through_json():
    exchange = rich_exchange()
    text = json.dumps(to_dict(exchange))
    back = from_dict(json.loads(text), Exchange)
    assert back == exchange
    assert back.ended_at.utcoffset() == dt.timedelta(hours=9)
    assert isinstance(back.input, tuple)
    assert isinstance(back.output[0].tool_calls, tuple)
    assert back.output[0].tool_calls[0].arguments == '{"city": "Paris", "unit":"C"}'
    assert back.usage.total_tokens == 150


def test_exchange_dict_is_json_ready():
    data = to_dict(rich_exchange())
    assert data["started_at"] == "2025-03-04T05:06:07.891011+00:00"
    assert data["usage"] == {"input_tokens": 120, "output_tokens": 30, "cached_input_tokens": 64}
    assert data["output"][0]["tool_calls"][0]["name"] == "get_weather"
    assert json.loads(json.dumps(data)) == data


def test_minimal_exchange_round_trips():
    exchange = Exchange(attribution=Attribution(), provider="p", operation="chat")
    assert from_dict(json.loads(json.dumps(to_dict(exchange))), Exchange) == exchange


def test_fact_and_session_info_round_trip():
    fact = Fact(entity_id="alice", text="Alice lives in Tokyo", supersedes="f0", metadata={"src": "chat"})
    info = SessionInfo(
        session_id="s1",
        entity_id="alice",
        process_id=None,
        created_at=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        updated_at=dt.datetime(2025, 1, 2, tzinfo=dt.timezone.utc),
        exchange_count=3,
    )
    scored = ScoredFact(fact=fact, score=0.5)
    assert from_dict(json.loads(json.dumps(to_dict(fact))), Fact) == fact
    assert from_dict(json.loads(json.dumps(to_dict(info))), SessionInfo) == info
    assert from_dict(json.loads(json.dumps(to_dict(scored))), ScoredFact) == scored


def test_invalid_role_is_rejected_on_read():
    with pytest.raises(cattrs.BaseValidationError):
        from_dict({"role": "wizard", "content": "x"}, Message)


def test_message_equality_ignores_store_fields():
    plain = Message(role="user", content="hi")
    stored = Message(
        role="user",
        content="hi",
        exchange_id="ex-9",
        created_at=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    )
    assert plain == stored
    assert hash(plain) == hash(stored)
    assert Message(role="user", content="hi") != Message(role="assistant", content="hi")
    assert Message(role="tool", content="r", tool_call_id="a") != Message(
        role="tool", content="r", tool_call_id="b"
    )


def test_message_dict_omits_store_fields():
    stored = Message(
        role="user", content="hi", exchange_id="ex-9", created_at=dt.datetime.now(dt.timezone.utc)
    )
    data = to_dict(stored)
    assert "exchange_id" not in data
    assert "created_at" not in data
    assert from_dict(data, Message) == stored


def test_tool_calls_list_is_converted_to_tuple():
    message = Message(role="assistant", tool_calls=[ToolCall(id="c", name="f")])
    assert message.tool_calls == (ToolCall(id="c", name="f", arguments="", type="function"),)


@pytest.mark.parametrize(
    ("usage", "total"),
    [
        (Usage(input_tokens=10, output_tokens=5), 15),
        (Usage(input_tokens=0, output_tokens=0), 0),
        (Usage(input_tokens=10, output_tokens=None), None),
        (Usage(input_tokens=None, output_tokens=5), None),
        (Usage(), None),
        (Usage(input_tokens=10, output_tokens=5, cached_input_tokens=8), 15),
    ],
)
def test_usage_total_tokens(usage, total):
    assert usage.total_tokens == total


def test_exchange_messages_are_input_then_output():
    exchange = rich_exchange()
    assert exchange.messages == exchange.input + exchange.output


def test_stored_messages_keep_every_field_and_get_the_exchanges_id_and_time():
    """exchange_messages builds each message field by field (for speed): a field added to
    Message and not carried over fails here."""
    from memtap.storage.store import exchange_messages

    call = ToolCall("c1", "lookup", "{}")
    given = Message("assistant", "text", (call,), "t1", "bot", "old-id", dt.datetime(2020, 1, 1))
    assert all(getattr(given, f.name) != f.default for f in attrs.fields(Message)), "set every field"
    exchange = attrs.evolve(rich_exchange(), input=(given,), output=())
    [stored] = exchange_messages(exchange)
    assert stored == attrs.evolve(given, exchange_id=exchange.id, created_at=exchange.started_at)
    for f in attrs.fields(Message):
        expected = {"exchange_id": exchange.id, "created_at": exchange.started_at}.get(
            f.name, getattr(given, f.name)
        )
        assert getattr(stored, f.name) == expected, f.name


def test_message_and_fact_print_readably_and_keep_their_repr():
    call = ToolCall("c1", "get_weather", '{"city": "Tokyo"}')
    msg = Message("assistant", "It is sunny.", tool_calls=[call])
    assert str(msg) == 'assistant: It is sunny.\n  -> get_weather({"city": "Tokyo"})'
    assert str(Message("user", "hi [image]", name="al")) == "user (al): hi [image]"
    assert repr(msg).startswith("Message(role='assistant', content='It is sunny.'")
    fact = Fact(entity_id="alice", text="Alice lives in Tokyo")
    assert str(fact) == "Alice lives in Tokyo"
    assert repr(fact).startswith("Fact(entity_id='alice', text='Alice lives in Tokyo'")
    assert fact == attrs.evolve(fact)  # equality and fields untouched


def test_message_renders_in_rich_without_reading_markup():
    from rich.console import Console

    console = Console(width=80, record=True, color_system=None)
    console.print(Message("user", "see [bold]this[/bold] and [image]"))
    assert console.export_text().strip() == "user: see [bold]this[/bold] and [image]"
