"""memtap's pytest plugin (entry point ``pytest11``): fixtures for testing memtap and
memtap plugins.

- ``memtap_server``: a running :class:`~memtap.testing.server.ScriptedModelServer`
  (OpenAI, Anthropic and Gemini wire formats, JSON and SSE), requests cleared per test.
- ``memtap_plugin_manager``: a fresh plugin manager with core's built-ins only (no
  entry-point loading): register the plugin under test on it.
- ``memtap_store``: a temporary in-process store (``memory://``).
- ``memtap_memory``: a :class:`memtap.Memory` on ``memtap_store`` with the plugins of
  ``memtap_plugins`` (override it in your conftest: ``return [my_plugin]``; none by default)
  and no entry points loaded, plus the keyword arguments of ``memtap_memory_options``
  (``{}`` by default); closed after the test.
- ``memtap_spans``: an in-memory span exporter installed on the global tracer provider,
  emptied before each test (needs ``opentelemetry-sdk``).
- ``memtap_spool_writes``: every byte memtap writes to any spool file during the test (even
  what is deleted once stored), to search for what must never reach the disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

# The shared suites' plain asserts report their operands only when pytest rewrites them.
pytest.register_assert_rewrite("memtap.testing.storage_suite", "memtap.testing.conformance")

from memtap.memory import plugin_manager  # noqa: E402
from memtap.plugins import PluginManager  # noqa: E402
from memtap.storage.store import InMemoryStore  # noqa: E402
from memtap.testing.server import ScriptedModelServer  # noqa: E402

if TYPE_CHECKING:
    from memtap.memory import Memory


@pytest.fixture(scope="session")
def _memtap_server_session() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def memtap_server(_memtap_server_session: ScriptedModelServer) -> ScriptedModelServer:
    """The local scripted model server, with no recorded requests or queued replies."""
    _memtap_server_session.clear()
    return _memtap_server_session


@pytest.fixture
def memtap_plugin_manager() -> PluginManager:
    """A plugin manager with core's built-in plugins and no entry points loaded."""
    return plugin_manager(entry_points=False)


@pytest.fixture
def memtap_store() -> Iterator[InMemoryStore]:
    """A fresh in-process store."""
    store = InMemoryStore()
    yield store
    store.close()


@pytest.fixture
def memtap_plugins() -> list[object]:
    """The plugins ``memtap_memory`` registers: none (core's built-ins only). Override it to
    test a plugin."""
    return []


@pytest.fixture
def memtap_memory_options() -> dict[str, Any]:
    """More keyword arguments for ``memtap_memory``'s Memory (none): override it, e.g.
    ``{"spool": False}``."""
    return {}


@pytest.fixture
def memtap_memory(
    memtap_store: InMemoryStore, memtap_plugins: list[object], memtap_memory_options: dict[str, Any]
) -> Iterator[Memory]:
    """A Memory on ``memtap_store`` with ``memtap_plugins`` and no entry points loaded."""
    from memtap.memory import Memory

    memory = Memory(memtap_store, plugins=memtap_plugins, entry_points=False, **memtap_memory_options)
    yield memory
    memory.close()


_EXPORTER: Any = None


def _span_exporter() -> Any:
    global _EXPORTER
    if _EXPORTER is None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _EXPORTER = exporter
    return _EXPORTER


@pytest.fixture
def memtap_spans() -> Any:
    """An ``InMemorySpanExporter`` receiving every finished span, emptied for this test."""
    exporter = _span_exporter()
    exporter.clear()
    return exporter


@pytest.fixture
def memtap_spool_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every byte written to a spool file during the test, in order."""
    from memtap.capture import spool

    written: list[bytes] = []
    real = spool._write

    def recording(fd: int, data: bytes) -> int:
        written.append(data)
        return real(fd, data)

    monkeypatch.setattr(spool, "_write", recording)
    return written
