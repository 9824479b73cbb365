"""The anthropic plugin passes the provider conformance suite, on ``messages`` and
``beta.messages``."""

from __future__ import annotations

import inspect

import anthropic

import memtap_anthropic
from memtap.testing.conformance import DerivedClientsSuite, RawStreamsSuite


def _text(message):
    return "".join(block.text for block in message.content if block.type == "text")


def _stream_text(events):
    return "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


class AnthropicDriver(DerivedClientsSuite, RawStreamsSuite):
    plugin = memtap_anthropic
    protocol_name = "anthropic.messages"

    def messages(self, client):
        return client.messages

    def make_client(self, server, *, is_async):
        cls = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        return cls(base_url=server.anthropic_base_url, api_key="sk-ant-conformance", max_retries=0)

    def derive(self, client):
        return client.with_options(timeout=30)

    def send_raw_stream(self, client, text):
        # How LangChain's ChatAnthropic streams.
        raw = self.messages(client).with_raw_response.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}], stream=True
        )
        return _stream_text(raw.parse())

    async def send_raw_stream_async(self, client, text):
        raw = await self.messages(client).with_raw_response.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}], stream=True
        )
        events = raw.parse()
        if inspect.isawaitable(events):  # async parse() in newer SDKs (LangChain's _aparse)
            events = await events
        return "".join(
            [
                e.delta.text
                async for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            ]
        )

    def send(self, client, text, *, stream):
        messages = [{"role": "user", "content": text}]
        api = self.messages(client)
        if not stream:
            return _text(api.create(model="m", max_tokens=64, messages=messages))
        events = api.create(model="m", max_tokens=64, messages=messages, stream=True)
        return "".join(
            e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )

    async def send_async(self, client, text, *, stream):
        messages = [{"role": "user", "content": text}]
        api = self.messages(client)
        if not stream:
            return _text(await api.create(model="m", max_tokens=64, messages=messages))
        events = await api.create(model="m", max_tokens=64, messages=messages, stream=True)
        return "".join(
            [
                e.delta.text
                async for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            ]
        )

    def send_and_break(self, client, text):
        events = self.messages(client).create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}], stream=True
        )
        for _event in events:
            break

    def send_raw(self, client, text):
        return self.messages(client).create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}]
        )

    def send_tool_result(self, client, text, answer, result):
        call = next(block for block in answer.content if block.type == "tool_use")
        return self.messages(client).create(
            model="m",
            max_tokens=64,
            messages=[
                {"role": "user", "content": text},
                {"role": "assistant", "content": [block.to_dict() for block in answer.content]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}],
                },
            ],
        )


class TestMessagesConformance(AnthropicDriver):
    pass


class TestBetaMessagesConformance(AnthropicDriver):
    def messages(self, client):
        return client.beta.messages


class TestStreamHelperConformance(AnthropicDriver):
    """The same suite with every streamed turn read through ``messages.stream(...)``."""

    def send(self, client, text, *, stream):
        if not stream:
            return super().send(client, text, stream=False)
        with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}]
        ) as s:
            return "".join(s.text_stream)

    async def send_async(self, client, text, *, stream):
        if not stream:
            return await super().send_async(client, text, stream=False)
        async with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}]
        ) as s:
            return "".join([t async for t in s.text_stream])

    def send_and_break(self, client, text):
        with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": text}]
        ) as s:
            for _event in s:
                break
