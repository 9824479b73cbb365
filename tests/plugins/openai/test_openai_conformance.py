"""The openai plugin passes the provider conformance suite, for both of its protocols."""

from __future__ import annotations

import openai

import memtap_openai
from memtap.testing.conformance import DerivedClientsSuite, RawStreamsSuite


class OpenAIDriver(DerivedClientsSuite, RawStreamsSuite):
    plugin = memtap_openai

    def make_client(self, server, *, is_async):
        cls = openai.AsyncOpenAI if is_async else openai.OpenAI
        return cls(base_url=server.openai_base_url, api_key="sk-conformance", max_retries=0)

    def derive(self, client):
        return client.with_options(timeout=30)


class TestChatCompletionsConformance(OpenAIDriver):
    protocol_name = "openai.chat"

    def send(self, client, text, *, stream):
        messages = [{"role": "user", "content": text}]
        if not stream:
            return client.chat.completions.create(model="m", messages=messages).choices[0].message.content
        chunks = client.chat.completions.create(model="m", messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    async def send_async(self, client, text, *, stream):
        messages = [{"role": "user", "content": text}]
        if not stream:
            reply = await client.chat.completions.create(model="m", messages=messages)
            return reply.choices[0].message.content
        chunks = await client.chat.completions.create(model="m", messages=messages, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    def send_and_break(self, client, text):
        for _chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], stream=True
        ):
            break

    def send_raw(self, client, text):
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])

    def send_raw_stream(self, client, text):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": text}], stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)

    async def send_raw_stream_async(self, client, text):
        async with client.chat.completions.with_streaming_response.create(
            model="m", messages=[{"role": "user", "content": text}], stream=True
        ) as response:
            chunks = await response.parse()
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    def send_tool_result(self, client, text, answer, result):
        message = answer.choices[0].message
        return client.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": text},
                message.to_dict(),
                {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": result},
            ],
        )


class TestResponsesConformance(OpenAIDriver):
    protocol_name = "openai.responses"

    def send(self, client, text, *, stream):
        if not stream:
            return client.responses.create(model="m", input=text).output_text
        events = client.responses.create(model="m", input=text, stream=True)
        return "".join(e.delta for e in events if e.type == "response.output_text.delta")

    async def send_async(self, client, text, *, stream):
        if not stream:
            return (await client.responses.create(model="m", input=text)).output_text
        events = await client.responses.create(model="m", input=text, stream=True)
        return "".join([e.delta async for e in events if e.type == "response.output_text.delta"])

    def send_and_break(self, client, text):
        for _event in client.responses.create(model="m", input=text, stream=True):
            break

    def send_raw(self, client, text):
        return client.responses.create(model="m", input=text)

    def send_raw_stream(self, client, text):
        with client.responses.with_streaming_response.create(model="m", input=text, stream=True) as response:
            return "".join(e.delta for e in response.parse() if e.type == "response.output_text.delta")

    async def send_raw_stream_async(self, client, text):
        raw = await client.responses.with_raw_response.create(model="m", input=text, stream=True)
        return "".join([e.delta async for e in raw.parse() if e.type == "response.output_text.delta"])

    def send_tool_result(self, client, text, answer, result):
        call = next(item for item in answer.output if item.type == "function_call")
        return client.responses.create(
            model="m",
            input=[
                {"role": "user", "content": text},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": result},
            ],
        )
