from __future__ import annotations

import importlib.metadata
import logging
import sys
import warnings
from pathlib import Path

import pytest

import memtap
from memtap.capture.accumulation import stream_accumulator
from memtap.capture.formatting import RedactPlugin
from memtap.formats.openai_chat import ChatFormatProtocol, ChatStreamAccumulator
from memtap.hookspecs import hookimpl
from memtap.memory import default_plugins, memory_plugins, plugin_manager
from memtap.plugins import ENTRY_POINT_GROUP, PluginInfo, PluginLoadWarning, make_plugin_manager
from memtap.protocol.model import Attribution, Exchange, Message, utcnow
from memtap.protocol.wire import RawExchange

BUILTINS = ("payload", "redact", "accumulator", "memory-store")
GOOD_MODULE = "memtap_testdist_good"
BROKEN_MODULE = "memtap_testdist_broken"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("MEMTAP_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("MEMTAP_TRACE_PLUGINS", raising=False)


@pytest.fixture
def test_distribution(tmp_path: Path, monkeypatch) -> Path:
    dist_info = tmp_path / "memtap_testdist-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: memtap-testdist\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nbroken = {BROKEN_MODULE}\ngood = {GOOD_MODULE}\n"
    )
    (tmp_path / f"{GOOD_MODULE}.py").write_text(
        "from memtap import hookimpl\n\n\n@hookimpl\ndef memtap_store_schemes():\n    return ['testdist']\n"
    )
    (tmp_path / f"{BROKEN_MODULE}.py").write_text("raise ImportError('missing native library libfoo.so')\n")
    for name in (GOOD_MODULE, BROKEN_MODULE):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in (GOOD_MODULE, BROKEN_MODULE):
        sys.modules.pop(name, None)


def test_builtins_are_registered_by_name():
    pm = plugin_manager(entry_points=False)
    for name in BUILTINS:
        assert pm.has_plugin(name)
    assert isinstance(pm.get_plugin("redact"), RedactPlugin)
    assert pm.hook.memtap_open_store(url="memory://x").url == "memory://x"


def test_every_builtin_of_a_memory_is_built_in_one_place():
    memory = memtap.Memory("memory://", entry_points=False, spool=False, embedder=False)
    try:
        registered = {name for name, plugin in memory.pm.list_name_plugin() if plugin is not None}
        stateful = memory_plugins(
            memory.histories, memory.history_budget, memory.longterm.engine, memtap.RecallBudget()
        )
        assert registered == memory.pm.builtin_names == set(default_plugins()) | set(stateful)
        for name, plugin in stateful.items():
            assert type(memory.pm.get_plugin(name)) is type(plugin)
    finally:
        memory.close()


def test_a_memory_registers_core_defaults_first_and_its_injectors_last_in_order():
    memory = memtap.Memory("memory://", entry_points=False, spool=False, embedder=False)
    try:
        names = [name for name, plugin in memory.pm.list_name_plugin() if plugin is not None]
        assert names == [
            "payload",
            "redact",
            "accumulator",
            "memory-store",
            "litellm-embedder",
            "history",
            "recall",
        ]
    finally:
        memory.close()


def test_the_plugin_manager_registers_only_the_defaults_it_is_handed():
    assert not make_plugin_manager(defaults={}, entry_points=False).builtin_names
    pm = make_plugin_manager(defaults={"redact": RedactPlugin()}, entry_points=False)
    assert pm.builtin_names == {"redact"}
    assert [name for name, _ in pm.list_name_plugin()] == ["redact"]


class _Chat(ChatFormatProtocol):
    name = "test.chat"
    provider = "test"


def test_a_stream_has_the_one_default_accumulator_even_with_the_builtin_disabled(monkeypatch):
    assert isinstance(
        stream_accumulator(plugin_manager(entry_points=False).hook, _Chat()), ChatStreamAccumulator
    )
    monkeypatch.setenv("MEMTAP_DISABLE_PLUGINS", "accumulator")
    pm = plugin_manager(entry_points=False)
    assert pm.hook.memtap_stream_accumulator(protocol=_Chat()) is None
    assert isinstance(stream_accumulator(pm.hook, _Chat()), ChatStreamAccumulator)


def test_disabling_a_builtin_blocks_it(monkeypatch):
    monkeypatch.setenv("MEMTAP_DISABLE_PLUGINS", " redact , memory-store")
    pm = plugin_manager(entry_points=False)
    assert not pm.has_plugin("redact")
    assert not pm.has_plugin("memory-store")
    assert pm.is_blocked("redact")
    assert pm.has_plugin("payload")
    assert pm.hook.memtap_open_store(url="memory://") is None


SECRET = "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90"


class SecretFormatter:
    @hookimpl(tryfirst=True)
    def memtap_format_exchange(self, raw: RawExchange) -> Exchange:
        return Exchange(
            attribution=Attribution(),
            provider="test",
            operation="chat",
            input=[Message(role="user", content=f"key {SECRET}")],
        )


def format_with(pm) -> Exchange:
    now = utcnow()
    raw = RawExchange(
        protocol=None,
        attribution=Attribution(),
        request_body={},
        response={},
        stream_result=None,
        already_present=0,
        started_at=now,
        ended_at=now,
    )
    return pm.hook.memtap_format_exchange(raw=raw)


def test_redact_builtin_wraps_formatters_unless_disabled(monkeypatch):
    redacting = plugin_manager(entry_points=False, extra=[SecretFormatter()])
    assert format_with(redacting).input[0].content == "key [REDACTED]"
    monkeypatch.setenv("MEMTAP_DISABLE_PLUGINS", "redact")
    plain = plugin_manager(entry_points=False, extra=[SecretFormatter()])
    assert format_with(plain).input[0].content == f"key {SECRET}"


def test_broken_plugin_warns_by_name_and_others_still_load(test_distribution):
    with pytest.warns(PluginLoadWarning) as record:
        pm = plugin_manager()
    messages = [str(w.message) for w in record if issubclass(w.category, PluginLoadWarning)]
    assert len(messages) == 1
    assert "'broken'" in messages[0]
    assert "memtap-testdist" in messages[0]
    assert "libfoo.so" in messages[0]
    assert "MEMTAP_DISABLE_PLUGINS=broken" in messages[0]
    assert not pm.has_plugin("broken")
    assert pm.has_plugin("good")
    for name in BUILTINS:
        assert pm.has_plugin(name)
    assert {"memory", "testdist"} <= {s for group in pm.hook.memtap_store_schemes() for s in group}


def test_disabling_an_entry_point_skips_importing_it(test_distribution, monkeypatch):
    monkeypatch.setenv("MEMTAP_DISABLE_PLUGINS", "good,broken")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PluginLoadWarning)
        pm = plugin_manager()
    assert not pm.has_plugin("good")
    assert not pm.has_plugin("broken")
    assert GOOD_MODULE not in sys.modules
    assert BROKEN_MODULE not in sys.modules


def test_describe_lists_hooks_per_plugin(test_distribution):
    with pytest.warns(PluginLoadWarning):
        pm = plugin_manager()
    info = {p.name: p for p in pm.describe()}

    assert info["good"] == PluginInfo(
        name="good",
        distribution="memtap-testdist",
        version="0.1",
        hooks=("memtap_store_schemes",),
        builtin=False,
    )
    assert info["payload"].hooks == ("memtap_format_exchange",)
    assert info["redact"].hooks == ("memtap_format_exchange",)
    assert info["accumulator"].hooks == ("memtap_stream_accumulator",)
    assert info["memory-store"].hooks == ("memtap_open_store", "memtap_store_schemes")
    for name in BUILTINS:
        assert info[name].builtin
        assert info[name].distribution == "memtap-core"
        assert info[name].version == memtap.__version__
    assert "broken" not in info
    names = [p.name for p in pm.describe()]
    assert names.index("good") > max(names.index(b) for b in BUILTINS)


def test_trace_env_logs_hook_calls(monkeypatch, caplog):
    monkeypatch.setenv("MEMTAP_TRACE_PLUGINS", "1")
    pm = plugin_manager(entry_points=False)
    with caplog.at_level(logging.INFO, logger="memtap.plugins.trace"):
        pm.hook.memtap_store_schemes()
    traced = [r.getMessage() for r in caplog.records if r.name == "memtap.plugins.trace"]
    assert any("memtap_store_schemes" in m for m in traced)
    assert any("finish" in m and "memory" in m for m in traced)


@pytest.mark.parametrize("value", ["", "0", "false"])
def test_trace_is_off_unless_asked(monkeypatch, caplog, value):
    monkeypatch.setenv("MEMTAP_TRACE_PLUGINS", value)
    pm = plugin_manager(entry_points=False)
    with caplog.at_level(logging.DEBUG, logger="memtap.plugins.trace"):
        pm.hook.memtap_store_schemes()
    assert [r for r in caplog.records if r.name == "memtap.plugins.trace"] == []


def test_installed_entry_point_names_are_unique():
    names = [ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert duplicates == []
