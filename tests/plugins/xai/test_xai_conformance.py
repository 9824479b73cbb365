"""The xai plugin passes the provider conformance suite: the real xai-sdk (sync and async)
against a local gRPC server implementing the SDK's own Chat servicer. The suite's ``server``
fixture is that server (same ``script``/``last_json`` interface; requests as proto JSON)."""

from __future__ import annotations

import pytest
from xai_sdk.chat import tool_result, user
from xai_server import make_xai

import memtap_xai
from memtap.testing.conformance import ProviderConformanceSuite

MODEL = "grok-test"


class TestXaiConformance(ProviderConformanceSuite):
    plugin = memtap_xai
    protocol_name = "xai.chat"

    @pytest.fixture
    def server(self, xai_server):
        return xai_server

    def make_client(self, server, *, is_async):
        return make_xai(server, is_async=is_async)

    def send(self, client, text, *, stream):
        chat = client.chat.create(model=MODEL, messages=[user(text)])
        if not stream:
            return chat.sample().content
        return "".join(chunk.content for _response, chunk in chat.stream())

    async def send_async(self, client, text, *, stream):
        chat = client.chat.create(model=MODEL, messages=[user(text)])
        if not stream:
            return (await chat.sample()).content
        return "".join([chunk.content async for _response, chunk in chat.stream()])

    def send_and_break(self, client, text):
        for _response, _chunk in client.chat.create(model=MODEL, messages=[user(text)]).stream():
            break

    def send_raw(self, client, text):
        return client.chat.create(model=MODEL, messages=[user(text)]).sample()

    def send_tool_result(self, client, text, answer, result):
        chat = client.chat.create(model=MODEL, messages=[user(text)])
        chat.append(answer)
        chat.append(tool_result(result, tool_call_id=answer.tool_calls[0].id))
        return chat.sample()
