"""``memtap proxy`` owns its process: it freezes what exists once it has started out of later
garbage collections and collects the youngest generation less often (a large agent request
makes thousands of objects). An app that runs the proxy in a thread keeps its own settings."""

from __future__ import annotations

import gc

import pytest
from proxy_support import make_memory

from memtap_proxy import server
from memtap_proxy.config import ProxyConfig


@pytest.fixture
def restored_gc():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_serve_tunes_the_collector_of_its_process(monkeypatch, restored_gc):
    monkeypatch.setattr(server.ProxyServer, "run", lambda self, *a, **k: None)
    memory = make_memory()
    gc.set_threshold(700, 10, 10)
    before = gc.get_freeze_count()
    try:
        server.serve(ProxyConfig(port=0), memory)
    finally:
        memory.close()
    assert gc.get_threshold() == (server.GC_YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() > before


def test_a_proxy_in_a_thread_leaves_the_apps_collector_alone(restored_gc):
    gc.set_threshold(700, 10, 10)
    memory = make_memory()
    try:
        with server.ProxyThread(server.Proxy(ProxyConfig(), memory)):
            pass
    finally:
        memory.close()
    assert gc.get_threshold() == (700, 10, 10)
