"""The provider conformance suite: one set of tests every provider plugin runs.

Subclass :class:`ProviderConformanceSuite` in your plugin's tests and fill in a small driver
(how to make a client for the local scripted server and how to send one user turn with it),
then pytest runs every behaviour memtap promises against your real SDK::

    class TestAcmeConformance(ProviderConformanceSuite):
        plugin = memtap_acme
        protocol_name = "acme.chat"

        def make_client(self, server, *, is_async):
            cls = acme.AsyncClient if is_async else acme.Client
            return cls(base_url=server.base_url, api_key="test-key")

        def send(self, client, text, *, stream):
            ...  # one user turn; return the answer text as the caller sees it

        async def send_async(self, client, text, *, stream):
            ...

        def send_and_break(self, client, text):
            ...  # start a stream, take one event, then abandon it

The tests use ``memtap_server`` (the scripted server, which answers ``You said: <text>``
unless a reply is scripted) and a fresh in-process store for every test. Declare what your
SDK cannot do by trimming :attr:`ProviderConformanceSuite.capabilities`.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest

from memtap.memory import Memory
from memtap.protocol.model import Exchange, Message
from memtap.protocol.wire import WireProtocol
from memtap.storage.store import InMemoryStore, StoreError
from memtap.testing.server import Reply, ScriptedModelServer, ToolCallSpec

#: Everything the suite checks; a driver removes what its SDK does not support.
ALL_CAPABILITIES = frozenset({"stream", "async", "tools", "usage", "break"})


class _BrokenStore(InMemoryStore):
    """A real store that is down: every write and read raises."""

    def write_exchanges(self, exchanges: Any) -> None:
        """Always fails."""
        raise StoreError("store is down (conformance test)")

    def history(
        self, session_id: str, *, entity_id: str | None = None, limit: int | None = None
    ) -> list[Message]:
        """Always fails."""
        raise StoreError("store is down (conformance test)")


class ProviderConformanceSuite:
    """Behaviour every provider plugin must show with its real SDK."""

    #: The plugin module (or object) under test.
    plugin: ClassVar[Any] = None
    #: The ``name`` of the wire protocol the driver's calls use.
    protocol_name: ClassVar[str] = ""
    #: What the provider supports; tests needing anything else are skipped with a reason.
    capabilities: ClassVar[frozenset[str]] = ALL_CAPABILITIES

    # -- the driver: override these ---------------------------------------------------

    def make_client(self, server: ScriptedModelServer, *, is_async: bool) -> Any:
        """A client of your SDK talking to ``server``."""
        raise NotImplementedError

    def send(self, client: Any, text: str, *, stream: bool) -> str:
        """Send one user turn ``text``; return the answer text as the caller sees it."""
        raise NotImplementedError

    async def send_async(self, client: Any, text: str, *, stream: bool) -> str:
        """The async form of :meth:`send`."""
        raise NotImplementedError

    def send_and_break(self, client: Any, text: str) -> None:
        """Start a streamed answer to ``text``, take one event, then abandon the stream."""
        raise NotImplementedError

    def send_tool_result(self, client: Any, text: str, answer: Any, result: str) -> str:
        """Send ``text`` again with the model's tool-call ``answer`` (what :meth:`send_raw`
        returned) and the tool ``result``, as an app answering a tool call does."""
        raise NotImplementedError

    def send_raw(self, client: Any, text: str) -> Any:
        """Send one user turn and return the SDK's response object unchanged."""
        raise NotImplementedError

    # -- fixtures ---------------------------------------------------------------------

    @pytest.fixture
    def server(self, memtap_server: ScriptedModelServer) -> ScriptedModelServer:
        """The scripted server, cleared."""
        return memtap_server

    @pytest.fixture
    def store(self) -> InMemoryStore:
        """A fresh store per test."""
        return InMemoryStore()

    @pytest.fixture
    def mem(self, store: InMemoryStore) -> Iterator[Memory]:
        """A Memory with only this plugin (no entry points)."""
        memory = Memory(store, plugins=[self.plugin], entry_points=False)
        yield memory
        memory.close(timeout=2)

    @pytest.fixture
    def client(self, mem: Memory, server: ScriptedModelServer) -> Any:
        """A registered sync client."""
        return mem.register(self.make_client(server, is_async=False))

    def _protocol(self, mem: Memory) -> WireProtocol:
        found = mem.wire_protocols().get(self.protocol_name)
        if found is None:
            raise AssertionError(f"the plugin does not list a wire protocol named {self.protocol_name!r}")
        return found

    def _sent(self, mem: Memory, server: ScriptedModelServer) -> list[tuple[str, str]]:
        view = self._protocol(mem).read_request(server.last_json())
        return [(m.role, m.content) for m in view.messages]

    @staticmethod
    def _exchanges(mem: Memory, session: str) -> list[Exchange]:
        assert mem.flush(timeout=10), "captured calls were not stored in time"
        return list(mem.store.exchanges(session_id=session))

    def _need(self, *capabilities: str) -> None:
        missing = set(capabilities) - self.capabilities
        if missing:
            pytest.skip(f"the provider declares no support for: {', '.join(sorted(missing))}")

    # -- the suite --------------------------------------------------------------------

    def test_history_is_injected(self, client: Any, mem: Memory, server: ScriptedModelServer) -> None:
        """The session's earlier turns go before the new message, on the wire."""
        with mem.scope(entity_id="conf", session_id="history"):
            self.send(client, "my name is Ada", stream=False)
            self.send(client, "what is my name?", stream=False)
        assert self._sent(mem, server) == [
            ("user", "my name is Ada"),
            ("assistant", "You said: my name is Ada"),
            ("user", "what is my name?"),
        ]

    def test_injected_history_is_not_captured_again(self, client: Any, mem: Memory) -> None:
        """Each turn is stored once, however often it was injected."""
        with mem.scope(entity_id="conf", session_id="once"):
            for text in ("one", "two", "three"):
                self.send(client, text, stream=False)
        history = [(m.role, m.content) for m in mem.history("once", entity_id="conf")]
        assert history == [
            (role, content)
            for text in ("one", "two", "three")
            for role, content in (("user", text), ("assistant", f"You said: {text}"))
        ]

    def test_streamed_text_equals_non_streamed_text(
        self, client: Any, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """A streamed answer is seen and stored exactly like the same answer unstreamed."""
        self._need("stream")
        answer = "the quick brown fox jumps over the lazy dog"
        server.script(Reply(text=answer, chunks=5), Reply(text=answer))
        with mem.scope(entity_id="conf", session_id="streamed"):
            streamed = self.send(client, "tell me", stream=True)
        with mem.scope(entity_id="conf", session_id="plain"):
            plain = self.send(client, "tell me", stream=False)
        assert streamed == plain == answer
        assert mem.history("streamed") == mem.history("plain")
        (ex,) = self._exchanges(mem, "streamed")
        assert ex.stream and ex.status == "ok"

    def test_early_break_finalises_exactly_once(
        self, client: Any, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """An abandoned stream is captured once, as partial."""
        self._need("stream", "break")
        server.script(Reply(text="a b c d e f g h", chunks=8))
        with mem.scope(entity_id="conf", session_id="break"):
            self.send_and_break(client, "stream please")
            gc.collect()
        exchanges = self._exchanges(mem, "break")
        assert len(exchanges) == 1
        assert exchanges[0].status == "partial"
        gc.collect()
        assert len(self._exchanges(mem, "break")) == 1

    def test_usage_is_captured(self, client: Any, mem: Memory, server: ScriptedModelServer) -> None:
        """Token usage reaches the store, streamed or not."""
        self._need("usage")
        server.script(Reply(text="x", input_tokens=31, output_tokens=9))
        kinds = [False, True] if "stream" in self.capabilities else [False]
        if len(kinds) == 2:
            server.script(Reply(text="x", input_tokens=31, output_tokens=9))
        for stream in kinds:
            with mem.scope(entity_id="conf", session_id=f"usage-{stream}"):
                self.send(client, "count", stream=stream)
            (ex,) = self._exchanges(mem, f"usage-{stream}")
            assert (ex.usage.input_tokens, ex.usage.output_tokens) == (31, 9)

    def test_tool_call_round_trip(self, client: Any, mem: Memory, server: ScriptedModelServer) -> None:
        """A tool call and its result are stored and injected together."""
        self._need("tools")
        server.script(
            Reply(tool_calls=(ToolCallSpec(name="get_time", arguments='{"tz": "UTC"}', id="call_conf"),))
        )
        with mem.scope(entity_id="conf", session_id="tools"):
            answer = self.send_raw(client, "what time is it?")
            self.send_tool_result(client, "what time is it?", answer, "12:00")
            self.send(client, "thanks", stream=False)
        history = mem.history("tools", entity_id="conf")
        calls = [c for m in history for c in m.tool_calls]
        assert [(c.name, c.arguments) for c in calls] == [("get_time", '{"tz": "UTC"}')]
        results = [m for m in history if m.role == "tool"]
        assert len(results) == 1 and results[0].tool_call_id == calls[0].id and "12:00" in results[0].content
        sent = self._protocol(mem).read_request(server.last_json()).messages
        sent_calls = [c.id for m in sent for c in m.tool_calls]
        sent_results = [m.tool_call_id for m in sent if m.role == "tool"]
        assert sent_calls == sent_results == [calls[0].id]

    def test_fail_open_when_the_store_raises(self, server: ScriptedModelServer) -> None:
        """A store that is down never fails the call, nor changes its answer."""
        mem = Memory(_BrokenStore(), plugins=[self.plugin], entry_points=False)
        client = mem.register(self.make_client(server, is_async=False))
        with mem.scope(entity_id="conf", session_id="down"):
            assert self.send(client, "still there?", stream=False) == "You said: still there?"
            if "stream" in self.capabilities:
                assert self.send(client, "and streamed?", stream=True) == "You said: and streamed?"
        assert self._sent(mem, server)[-1] == (
            "user",
            "and streamed?" if "stream" in self.capabilities else "still there?",
        )
        mem.close(timeout=0.2)

    def test_unregister_restores(self, client: Any, mem: Memory, server: ScriptedModelServer) -> None:
        """After unregister, calls are neither injected nor captured."""
        with mem.scope(entity_id="conf", session_id="unreg"):
            self.send(client, "before", stream=False)
            mem.unregister(client)
            self.send(client, "after", stream=False)
        assert self._sent(mem, server) == [("user", "after")]
        assert [m.content for m in mem.history("unreg")] == ["before", "You said: before"]

    def test_async_calls_inject_and_capture(self, mem: Memory, server: ScriptedModelServer) -> None:
        """The async client behaves like the sync one, streamed and not."""
        self._need("async")
        streams = [False, True] if "stream" in self.capabilities else [False]

        async def main() -> list[str]:
            # Made inside the loop: some SDKs (gRPC aio) bind a client to the loop it was
            # created on.
            client = mem.register(self.make_client(server, is_async=True))
            with mem.scope(entity_id="conf", session_id="async"):
                return [await self.send_async(client, f"async {s}", stream=s) for s in streams]

        answers = asyncio.run(main())
        assert answers == [f"You said: async {s}" for s in streams]
        assert self._sent(mem, server)[0] == ("user", "async False")
        assert len(mem.history("async")) == 2 * len(streams)

    # -- a request the provider rejects because of what memtap injected ------------------

    def _request_bodies(self, server: ScriptedModelServer, since: int) -> list[Any]:
        """The JSON bodies of the requests the server got from index ``since`` on."""
        return [r if isinstance(r, Mapping) else r.json for r in list(server.requests)[since:]]

    def _sent_bare(self, mem: Memory, server: ScriptedModelServer, text: str, *, stream: bool) -> Any:
        """The body an unregistered client of the SDK sends for the same turn (a client
        that is the registered one, such as the litellm module, is unregistered meanwhile)."""
        bare = self.make_client(server, is_async=False)
        shared = any(c is bare for c, _ in mem.registered())
        if shared:
            mem.unregister(bare)
        before = len(server.requests)
        try:
            self.send(bare, text, stream=stream)
        finally:
            if shared:
                mem.register(bare)
        (body,) = self._request_bodies(server, before)
        return body

    def test_a_request_rejected_for_the_injection_is_sent_again_as_the_app_built_it(
        self, client: Any, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """The provider rejects (HTTP 400) a request carrying injected history: the app's
        own request is sent once more, the app gets its answer, the turn is stored once."""
        streams = [False, True] if "stream" in self.capabilities else [False]
        with mem.scope(entity_id="conf-resend", session_id="resend"):
            self.send(client, "my name is Ada", stream=False)
            for stream in streams:
                server.script(Reply(status=400, text="scripted rejection of the injected history"))
                before = len(server.requests)
                answer = self.send(client, f"what is my name? {stream}", stream=stream)
                assert answer == f"You said: what is my name? {stream}"
                rejected, resent = self._request_bodies(server, before)
                protocol = self._protocol(mem)
                assert len(protocol.read_request(rejected).messages) > 1  # the history was on it
                assert resent == self._sent_bare(mem, server, f"what is my name? {stream}", stream=stream)
        history = [m.content for m in mem.history("resend", entity_id="conf-resend")]
        assert history[:2] == ["my name is Ada", "You said: my name is Ada"]
        for stream in streams:
            assert history.count(f"what is my name? {stream}") == 1
            assert history.count(f"You said: what is my name? {stream}") == 1
        assert len(self._exchanges(mem, "resend")) == 1 + len(streams)

    def test_an_async_request_rejected_for_the_injection_is_sent_again(
        self, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """The same with the async client, streamed and not."""
        self._need("async")
        streams = [False, True] if "stream" in self.capabilities else [False]

        async def main() -> list[str]:
            aclient = mem.register(self.make_client(server, is_async=True))
            answers = []
            with mem.scope(entity_id="conf-resend", session_id="resend-async"):
                await self.send_async(aclient, "my name is Ada", stream=False)
                for stream in streams:
                    server.script(Reply(status=400, text="scripted rejection"))
                    answers.append(await self.send_async(aclient, f"async {stream}", stream=stream))
            return answers

        assert asyncio.run(main()) == [f"You said: async {s}" for s in streams]
        history = [m.content for m in mem.history("resend-async", entity_id="conf-resend")]
        assert len(history) == 2 + 2 * len(streams)
        assert self._sent(mem, server)[-1][1] == f"async {streams[-1]}"
        assert len(self._sent(mem, server)) == 1  # the last request was the app's own

    @pytest.mark.parametrize("status", [401, 403, 429])
    def test_other_errors_are_never_sent_again(
        self, client: Any, mem: Memory, server: ScriptedModelServer, status: int
    ) -> None:
        """Authentication, permission and rate-limit errors are not memtap's doing: it never
        sends such a request again without its changes (an SDK may retry a 429 itself, the
        same request)."""
        with mem.scope(entity_id="conf-errors", session_id=f"errors-{status}"):
            self.send(client, "my name is Ada", stream=False)
            server.script(Reply(status=status, text="scripted error"))
            before = len(server.requests)
            try:
                self.send(client, "what is my name?", stream=False)
            except Exception:  # each SDK raises its own type
                pass
        bodies = self._request_bodies(server, before)
        protocol = self._protocol(mem)
        assert bodies and all(len(protocol.read_request(b).messages) == 3 for b in bodies)
        if status != 429:
            assert len(bodies) == 1

    def test_a_rejected_request_memtap_left_unchanged_is_not_sent_again(
        self, client: Any, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """With nothing injected, the provider's rejection is the app's own: one request."""
        with mem.scope(entity_id="conf-untouched", session_id="untouched"):
            server.script(Reply(status=400, text="the app's own mistake"))
            before = len(server.requests)
            with pytest.raises(Exception):  # noqa: B017
                self.send(client, "hello", stream=False)
        assert len(self._request_bodies(server, before)) == 1


class DerivedClientsSuite(ProviderConformanceSuite):
    """For an SDK that makes new clients from a client (``client.with_options(...)``,
    ``client.copy()``): subclass this instead of :class:`ProviderConformanceSuite` and add
    :meth:`derive` to the driver."""

    def derive(self, client: Any) -> Any:
        """A new client the SDK makes from ``client`` with other options
        (``client.with_options(timeout=...)``)."""
        raise NotImplementedError

    def test_derived_clients_are_tapped_by_the_same_memory(
        self, client: Any, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """A client made from a registered one (and one made from that) is injected and
        captured like its parent, and unregistered with it."""
        derived = self.derive(client)
        grandchild = self.derive(derived)
        with mem.scope(entity_id="conf", session_id="derived"):
            self.send(client, "parent", stream=False)
            self.send(derived, "derived", stream=False)
            self.send(grandchild, "grandchild", stream=False)
        assert self._sent(mem, server) == [
            ("user", "parent"),
            ("assistant", "You said: parent"),
            ("user", "derived"),
            ("assistant", "You said: derived"),
            ("user", "grandchild"),
        ]
        assert len(mem.history("derived")) == 6
        mem.unregister(client)
        with mem.scope(entity_id="conf", session_id="derived-off"):
            self.send(derived, "untapped", stream=False)
        assert self._sent(mem, server) == [("user", "untapped")]
        assert mem.history("derived-off") == []


class RawStreamsSuite(ProviderConformanceSuite):
    """For an SDK that returns streams through a raw-response view
    (``with_raw_response.create(..., stream=True)`` then ``.parse()``): subclass this and add
    :meth:`send_raw_stream` and :meth:`send_raw_stream_async` to the driver."""

    def send_raw_stream(self, client: Any, text: str) -> str:
        """One streamed turn through the SDK's raw-response view, read through its
        ``parse()``; return the answer text."""
        raise NotImplementedError

    async def send_raw_stream_async(self, client: Any, text: str) -> str:
        """The async form of :meth:`send_raw_stream`."""
        raise NotImplementedError

    def test_raw_streams_are_captured_like_any_stream(
        self, client: Any, mem: Memory, server: ScriptedModelServer
    ) -> None:
        """A stream read through the raw-response view is injected, seen unchanged and
        stored like the same stream read directly (sync and async)."""
        answer = "the quick brown fox jumps"
        with mem.scope(entity_id="conf", session_id="raw"):
            self.send(client, "before", stream=False)
            server.script(Reply(text=answer, chunks=4))
            assert self.send_raw_stream(client, "raw please") == answer
        assert self._sent(mem, server)[:2] == [("user", "before"), ("assistant", "You said: before")]
        assert [m.content for m in mem.history("raw")][2:] == ["raw please", answer]
        exchanges = self._exchanges(mem, "raw")
        assert exchanges[-1].stream and exchanges[-1].status == "ok"
        if "async" not in self.capabilities:
            return

        async def main() -> str:
            aclient = mem.register(self.make_client(server, is_async=True))
            with mem.scope(entity_id="conf", session_id="raw-async"):
                return await self.send_raw_stream_async(aclient, "async raw")

        assert asyncio.run(main()) == "You said: async raw"
        assert [m.content for m in mem.history("raw-async")] == ["async raw", "You said: async raw"]
