"""The google plugin passes the provider conformance suite with google-genai, through
``models`` and through chats."""

from __future__ import annotations

from google import genai
from google.genai import types

import memtap_google
from memtap.testing.conformance import ProviderConformanceSuite


def _client(server):
    return genai.Client(
        api_key="test-key",
        http_options=types.HttpOptions(base_url=server.gemini_base_url, retry_options=None),
    )


class TestModelsConformance(ProviderConformanceSuite):
    plugin = memtap_google
    protocol_name = "google.generate_content"

    def make_client(self, server, *, is_async):
        client = _client(server)
        return client.aio if is_async else client

    def send(self, client, text, *, stream):
        if not stream:
            return client.models.generate_content(model="gemini-x", contents=text).text
        return "".join(
            c.text or "" for c in client.models.generate_content_stream(model="gemini-x", contents=text)
        )

    async def send_async(self, client, text, *, stream):
        if not stream:
            return (await client.models.generate_content(model="gemini-x", contents=text)).text
        chunks = await client.models.generate_content_stream(model="gemini-x", contents=text)
        return "".join([c.text or "" async for c in chunks])

    def send_and_break(self, client, text):
        for _chunk in client.models.generate_content_stream(model="gemini-x", contents=text):
            break

    def send_raw(self, client, text):
        return client.models.generate_content(model="gemini-x", contents=text)

    def send_tool_result(self, client, text, answer, result):
        content = answer.candidates[0].content
        call = content.parts[0].function_call
        response = types.Part(
            function_response=types.FunctionResponse(id=call.id, name=call.name, response={"result": result})
        )
        return client.models.generate_content(
            model="gemini-x",
            contents=[
                types.Content(role="user", parts=[types.Part(text=text)]),
                content,
                types.Content(role="user", parts=[response]),
            ],
        )


class TestChatsConformance(TestModelsConformance):
    """Every turn through a chat (``send_message`` / ``send_message_stream``); a tool
    result goes back through the chat that asked for it."""

    def send(self, client, text, *, stream):
        chat = client.chats.create(model="gemini-x")
        if not stream:
            return chat.send_message(text).text
        return "".join(c.text or "" for c in chat.send_message_stream(text))

    async def send_async(self, client, text, *, stream):
        chat = client.chats.create(model="gemini-x")
        if not stream:
            return (await chat.send_message(text)).text
        return "".join([c.text or "" async for c in await chat.send_message_stream(text)])

    def send_and_break(self, client, text):
        for _chunk in client.chats.create(model="gemini-x").send_message_stream(text):
            break

    def send_raw(self, client, text):
        chat = client.chats.create(model="gemini-x")
        return chat, chat.send_message(text)

    def send_tool_result(self, client, text, answer, result):
        chat, response = answer
        call = response.candidates[0].content.parts[0].function_call
        return chat.send_message(
            types.Part(
                function_response=types.FunctionResponse(
                    id=call.id, name=call.name, response={"result": result}
                )
            )
        )
