"""The litellm plugin passes the provider conformance suite: real litellm, a real HTTP
round trip to the scripted server through litellm's ``openai/`` provider."""

from __future__ import annotations

import litellm

import memtap_litellm
from memtap.testing.conformance import ProviderConformanceSuite

API_KEY = "sk-conformance-0123456789abcdef"


class TestLiteLLMConformance(ProviderConformanceSuite):
    plugin = memtap_litellm
    protocol_name = "litellm.chat"

    def make_client(self, server, *, is_async):
        self.base = server.openai_base_url
        return litellm

    def _kw(self, text, **extra):
        return {
            "model": "openai/m",
            "messages": [{"role": "user", "content": text}],
            "api_base": self.base,
            "api_key": API_KEY,
            **extra,
        }

    def send(self, client, text, *, stream):
        if not stream:
            return client.completion(**self._kw(text)).choices[0].message.content
        chunks = client.completion(**self._kw(text, stream=True))
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    async def send_async(self, client, text, *, stream):
        if not stream:
            return (await client.acompletion(**self._kw(text))).choices[0].message.content
        chunks = await client.acompletion(**self._kw(text, stream=True))
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    def send_and_break(self, client, text):
        for _chunk in client.completion(**self._kw(text, stream=True)):
            break

    def send_raw(self, client, text):
        return client.completion(**self._kw(text))

    def send_tool_result(self, client, text, answer, result):
        message = answer.choices[0].message
        kw = self._kw(text)
        kw["messages"] = [
            {"role": "user", "content": text},
            message,  # the response's own message object, as litellm apps often resend it
            {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": result},
        ]
        return client.completion(**kw)
