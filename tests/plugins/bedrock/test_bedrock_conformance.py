"""The bedrock plugin passes the provider conformance suite with real boto3 clients over a
real HTTP round trip to a local bedrock-runtime endpoint (event streams included), for
Converse and for Anthropic bodies through invoke_model.

The suite's ``server`` fixture is replaced by that endpoint (same ``script``/``last_json``
interface); ``async`` is not declared: boto3 has no asyncio client.
"""

from __future__ import annotations

import json

import pytest
from bedrock_server import MODEL, make_bedrock

import memtap_bedrock
from memtap.testing.conformance import ALL_CAPABILITIES, ProviderConformanceSuite


class BedrockDriver(ProviderConformanceSuite):
    plugin = memtap_bedrock
    capabilities = ALL_CAPABILITIES - {"async"}

    @pytest.fixture
    def server(self, bedrock_server):
        return bedrock_server

    def make_client(self, server, *, is_async):
        return make_bedrock(server.base_url)


class TestConverseConformance(BedrockDriver):
    protocol_name = "bedrock.converse"

    @staticmethod
    def _messages(text):
        return [{"role": "user", "content": [{"text": text}]}]

    def send(self, client, text, *, stream):
        if not stream:
            reply = client.converse(modelId=MODEL, messages=self._messages(text))
            return reply["output"]["message"]["content"][0]["text"]
        events = client.converse_stream(modelId=MODEL, messages=self._messages(text))["stream"]
        return "".join(
            e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
        )

    def send_and_break(self, client, text):
        for _event in client.converse_stream(modelId=MODEL, messages=self._messages(text))["stream"]:
            break

    def send_raw(self, client, text):
        return client.converse(modelId=MODEL, messages=self._messages(text))

    def send_tool_result(self, client, text, answer, result):
        message = answer["output"]["message"]
        tool_use = next(b["toolUse"] for b in message["content"] if "toolUse" in b)
        result_block = {"toolResult": {"toolUseId": tool_use["toolUseId"], "content": [{"text": result}]}}
        messages = [*self._messages(text), message, {"role": "user", "content": [result_block]}]
        return client.converse(modelId=MODEL, messages=messages)


class TestAnthropicInvokeConformance(BedrockDriver):
    protocol_name = "bedrock.anthropic"

    @staticmethod
    def _body(messages):
        return json.dumps(
            {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 256, "messages": messages}
        )

    def send(self, client, text, *, stream):
        body = self._body([{"role": "user", "content": text}])
        if not stream:
            reply = json.loads(client.invoke_model(modelId=MODEL, body=body)["body"].read())
            return reply["content"][0]["text"]
        events = client.invoke_model_with_response_stream(modelId=MODEL, body=body)["body"]
        text_out = []
        for event in events:
            data = json.loads(event["chunk"]["bytes"])
            if data["type"] == "content_block_delta" and data["delta"]["type"] == "text_delta":
                text_out.append(data["delta"]["text"])
        return "".join(text_out)

    def send_and_break(self, client, text):
        body = self._body([{"role": "user", "content": text}])
        for _event in client.invoke_model_with_response_stream(modelId=MODEL, body=body)["body"]:
            break

    def send_raw(self, client, text):
        body = self._body([{"role": "user", "content": text}])
        return json.loads(client.invoke_model(modelId=MODEL, body=body)["body"].read())

    def send_tool_result(self, client, text, answer, result):
        tool_use = next(b for b in answer["content"] if b["type"] == "tool_use")
        messages = [
            {"role": "user", "content": text},
            {"role": "assistant", "content": answer["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": result}],
            },
        ]
        return client.invoke_model(modelId=MODEL, body=self._body(messages))
