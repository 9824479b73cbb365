"""The openai plugin's hook implementations, called through a plugin manager."""

from __future__ import annotations

import subprocess
import sys

import openai
from openai_support import API_KEY, user

import memtap
import memtap_openai
from memtap import hookimpl
from memtap.memory import plugin_manager
from memtap.protocol.wire import ClientAdapter, WireProtocol


def test_memtap_match_client_recognises_sync_and_async_clients_only():
    pm = plugin_manager(entry_points=False, extra=[memtap_openai])
    for client in (openai.OpenAI(api_key=API_KEY), openai.AsyncOpenAI(api_key=API_KEY)):
        adapter = pm.hook.memtap_match_client(client=client)
        assert isinstance(adapter, ClientAdapter) and adapter.provider == "openai"
    assert pm.hook.memtap_match_client(client=object()) is None
    assert pm.hook.memtap_match_client(client=openai.OpenAI) is None, "a class is not a client"


def test_matching_never_imports_the_sdk():
    code = (
        "import sys, memtap_openai\n"
        "from memtap.memory import plugin_manager\n"
        "pm = plugin_manager(entry_points=False, extra=[memtap_openai])\n"
        "assert pm.hook.memtap_match_client(client=object()) is None\n"
        "assert 'openai' not in sys.modules, 'matching imported openai'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_memtap_wire_protocols_lists_chat_and_responses():
    pm = plugin_manager(entry_points=False, extra=[memtap_openai])
    protocols = [p for group in pm.hook.memtap_wire_protocols() for p in group]
    assert sorted(p.name for p in protocols) == ["openai.chat", "openai.responses"]
    assert all(isinstance(p, WireProtocol) and p.provider == "openai" for p in protocols)


class CountingAccumulators:
    def __init__(self):
        self.events = 0

    @hookimpl(tryfirst=True)
    def memtap_stream_accumulator(self, protocol):
        inner = protocol.new_accumulator()
        outer = self

        class Counting:
            def feed(self, event):
                outer.events += 1
                inner.feed(event)

            def result(self):
                return inner.result()

        return Counting()


def test_memtap_stream_accumulator_can_be_replaced_by_a_plugin(server, store):
    counting = CountingAccumulators()
    mem = memtap.Memory(store, plugins=[memtap_openai, counting], entry_points=False)
    client = mem.register(openai.OpenAI(base_url=server.openai_base_url, api_key=API_KEY))
    with mem.scope(session_id="acc"):
        chunks = list(client.chat.completions.create(model="m", messages=[user("q")], stream=True))
    mem.flush()
    assert counting.events == len(chunks) + 1, "every event, the hidden usage chunk included"
    assert [m.content for m in mem.history("acc")] == ["q", "You said: q"]
    mem.close()
