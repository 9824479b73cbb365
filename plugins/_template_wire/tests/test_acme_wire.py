"""The Acme plugin passes memtap's provider conformance suite with the (fictional) Acme SDK
against memtap's local scripted model server, plus a test of its own.

``memtap.testing`` is a pytest plugin installed with memtap-core: it provides the
``memtap_server`` fixture the suite uses (a local server speaking the OpenAI, Anthropic and
Gemini wire formats). Nothing here needs the network or an API key.
"""

from __future__ import annotations

import acme_wire_sdk

import memtap
import memtap_acme_wire
from memtap.testing.conformance import ProviderConformanceSuite


def _text(answer):
    return answer["choices"][0]["message"]["content"]


def _streamed_text(events):
    return "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e["choices"])


class TestAcmeWireConformance(ProviderConformanceSuite):
    """Every behaviour memtap promises, with the Acme SDK. Trim ``capabilities`` if your SDK
    lacks something (e.g. ``ALL_CAPABILITIES - {"async"}``): those tests are skipped."""

    plugin = memtap_acme_wire
    protocol_name = "acme_wire.chat"

    def make_client(self, server, *, is_async):
        """A client of the SDK pointed at the scripted server."""
        cls = acme_wire_sdk.AsyncAcmeClient if is_async else acme_wire_sdk.AcmeClient
        return cls(base_url=server.openai_base_url, api_key="acme-test-key")

    def send(self, client, text, *, stream):
        """One user turn; the answer text as the caller sees it."""
        answer = client.chat(model="acme-1", messages=[{"role": "user", "content": text}], stream=stream)
        return _streamed_text(answer) if stream else _text(answer)

    async def send_async(self, client, text, *, stream):
        """The same with the async client."""
        answer = await client.chat(
            model="acme-1", messages=[{"role": "user", "content": text}], stream=stream
        )
        if not stream:
            return _text(answer)
        return "".join(
            [(e["choices"][0]["delta"].get("content") or "") async for e in answer if e["choices"]]
        )

    def send_and_break(self, client, text):
        """Start a stream, take one event, abandon it."""
        for _event in client.chat(model="acme-1", messages=[{"role": "user", "content": text}], stream=True):
            break

    def send_raw(self, client, text):
        """One user turn; the SDK's response as it is (here: a tool call)."""
        return client.chat(model="acme-1", messages=[{"role": "user", "content": text}])

    def send_tool_result(self, client, text, answer, result):
        """Answer the tool call in ``answer`` with ``result``, as an app does."""
        message = answer["choices"][0]["message"]
        call_id = message["tool_calls"][0]["id"]
        return client.chat(
            model="acme-1",
            messages=[
                {"role": "user", "content": text},
                message,
                {"role": "tool", "tool_call_id": call_id, "content": result},
            ],
        )


def test_streamed_events_are_what_the_caller_would_see_without_memtap(memtap_server):
    """memtap asks for stream usage, and hides from the caller what it asked for."""
    mem = memtap.Memory("memory://", plugins=[memtap_acme_wire], entry_points=False)
    client = mem.register(acme_wire_sdk.AcmeClient(base_url=memtap_server.openai_base_url, api_key="k"))
    events = list(client.chat(model="acme-1", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert memtap_server.last_json()["stream_options"] == {"include_usage": True}  # memtap asked
    assert all(e["choices"] and "usage" not in e for e in events)  # and hid what it asked for
    mem.close()
