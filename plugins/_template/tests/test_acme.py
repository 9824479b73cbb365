"""The Acme plugin passes memtap's provider conformance suite with the (fictional) Acme SDK
against memtap's local scripted model server, plus tests of its own.

``memtap.testing`` is a pytest plugin installed with memtap-core: it provides the
``memtap_server`` fixture (a local server on 127.0.0.1 speaking the OpenAI, Anthropic and
Gemini wire formats). Nothing here needs the network or an API key.
"""

from __future__ import annotations

import acme_sdk

import memtap
import memtap_acme
from memtap.testing.conformance import ProviderConformanceSuite


def _ask(client, text, **fields):
    return client.chat(model="acme-1", messages=[{"role": "user", "content": text}], **fields)


def _text(answer):
    return answer["choices"][0]["message"]["content"]


def _delta(event):
    return (event["choices"][0]["delta"].get("content") or "") if event["choices"] else ""


class TestAcmeConformance(ProviderConformanceSuite):
    """Every behaviour memtap promises, with the Acme SDK. Trim ``capabilities`` if your SDK
    lacks something (e.g. ``ALL_CAPABILITIES - {"async"}``): those tests are skipped."""

    plugin = memtap_acme
    protocol_name = "acme.chat"

    def make_client(self, server, *, is_async):
        """A client of the SDK pointed at the scripted server."""
        cls = acme_sdk.AsyncAcmeClient if is_async else acme_sdk.AcmeClient
        return cls(base_url=server.openai_base_url, api_key="acme-test-key")

    def send(self, client, text, *, stream):
        """One user turn; the answer text as the caller sees it."""
        answer = _ask(client, text, stream=stream)
        return "".join(_delta(e) for e in answer) if stream else _text(answer)

    async def send_async(self, client, text, *, stream):
        """The same with the async client."""
        answer = await _ask(client, text, stream=stream)
        return "".join([_delta(e) async for e in answer]) if stream else _text(answer)

    def send_and_break(self, client, text):
        """Start a stream, take one event, abandon it."""
        for _event in _ask(client, text, stream=True):
            break

    def send_raw(self, client, text):
        """One user turn; the SDK's response as it is (here: a tool call)."""
        return _ask(client, text)

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


def test_the_plugin_is_found_through_its_entry_point(memtap_server):
    """Installed, the plugin needs no ``plugins=[...]``: memtap finds it by its entry point."""
    mem = memtap.Memory("memory://")
    client = mem.register(acme_sdk.AcmeClient(base_url=memtap_server.openai_base_url, api_key="k"))
    with mem.scope(entity_id="ep", session_id="ep"):
        _ask(client, "my name is Ada")
        _ask(client, "what is my name?")
    assert memtap_server.last_json()["messages"][0]["content"] == "my name is Ada"  # history injected
    mem.close()


def test_streamed_events_are_what_the_caller_would_see_without_memtap(memtap_server):
    """memtap asks for stream usage, and hides from the caller what it asked for."""
    mem = memtap.Memory("memory://", plugins=[memtap_acme], entry_points=False)
    client = mem.register(acme_sdk.AcmeClient(base_url=memtap_server.openai_base_url, api_key="k"))
    events = list(_ask(client, "hi", stream=True))
    assert memtap_server.last_json()["stream_options"] == {"include_usage": True}  # memtap asked
    assert events and all(e["choices"] and "usage" not in e for e in events)  # and hid it
    mem.close()
