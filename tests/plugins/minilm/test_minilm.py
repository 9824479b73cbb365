"""The MiniLM embedder: offline, no torch, files from site-packages, sensible vectors,
found through the memtap_embedder hook, and recall by meaning with it."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import memtap
import memtap_minilm
from memtap.longterm.embedding import resolve_embedder
from memtap.memory import plugin_manager
from memtap.storage.store import InMemoryStore
from memtap_minilm.embedder import DIM, MODEL_NAME, MiniLMEmbedder, model_path, tokenizer_path


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    e = MiniLMEmbedder()
    e.load()
    return e


def test_model_files_come_from_site_packages():
    assert model_path().is_file() and model_path().stat().st_size > 20_000_000
    assert tokenizer_path().is_file() and tokenizer_path().name == "tokenizer.json"
    assert "site-packages" in str(model_path()) or "dist-packages" in str(model_path())


def test_vectors_are_unit_length_and_semantic(embedder):
    v = embedder.embed(["I adopted a beagle", "what dog do I have?", "the quarterly tax report", ""])
    assert v.shape == (4, DIM) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    # Batching and padding do not change a sentence's vector.
    alone = embedder.embed(["what dog do I have?"])[0]
    assert np.allclose(alone, v[1], atol=1e-4)


def test_hook_answers_default_and_minilm_only():
    pm = plugin_manager(entry_points=False, extra=[memtap_minilm])
    assert resolve_embedder(None, pm).name == MODEL_NAME
    assert resolve_embedder("minilm", pm).name == MODEL_NAME
    assert memtap_minilm.memtap_embedder(spec="litellm:x") is None


def test_import_is_light_and_no_torch_anywhere():
    code = (
        "import sys, memtap_minilm; heavy = [m for m in ('onnxruntime', 'tokenizers', 'numpy', 'torch') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = (
        "from memtap_minilm.embedder import MiniLMEmbedder; MiniLMEmbedder().embed(['x']); "
        "import sys; print('torch' in sys.modules)"
    )
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


def test_recall_by_meaning_with_minilm():
    mem = memtap.Memory(InMemoryStore(), entry_points=False, plugins=[memtap_minilm])
    mem.remember("I adopted a beagle called Mochi", entity_id="alice")
    mem.remember("I work as a nurse at the city hospital", entity_id="alice")
    mem.remember("My favourite food is ramen", entity_id="alice")
    assert (
        mem.recall("what dog do I have?", entity_id="alice", k=1)[0].text == "I adopted a beagle called Mochi"
    )
    assert mem.recall("what is my job?", entity_id="alice", k=1)[0].text.startswith("I work as a nurse")
    mem.close()


class RecordingLoads(MiniLMEmbedder):
    """MiniLM, recording the threads that load its tokenizer or its model."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.load_threads: list[str] = []

    def load(self) -> None:
        if self._session is None:
            self.load_threads.append(threading.current_thread().name)
        super().load()

    def _load_tokenizer(self):
        if self._tokenizer is None:
            self.load_threads.append(threading.current_thread().name)
        return super()._load_tokenizer()


def test_quick_query_never_loads_anything_in_the_callers_thread():
    e = RecordingLoads()
    assert e.quick_query("what dog do I have?") is None  # not loaded yet: no vector, no load
    assert e.load_threads == [] and e._session is None and e._tokenizer is None
    loader = threading.Thread(target=e.warm_up, name="loader")
    loader.start()
    loader.join(60)
    assert e._session is not None and set(e.load_threads) == {"loader"}


def test_the_first_request_path_recall_does_not_load_the_model():
    """The first recall with a warm index used to load MiniLM in the request's thread
    (1.3-2.3 s); it answers by words while the model loads in the background."""
    e = RecordingLoads()
    mem = memtap.Memory(InMemoryStore(), entry_points=False, embedder=e)
    mem.longterm.store.add_facts([memtap.Fact(entity_id="alice", text="I adopted a beagle called Mochi")])
    assert mem.longterm.engine.indexes.get("alice", wait=True) is not None
    hits = mem.recall("my beagle Mochi", entity_id="alice", deadline=0.05)
    assert [h.text for h in hits] == ["I adopted a beagle called Mochi"]
    assert threading.current_thread().name not in e.load_threads
    assert mem.longterm.engine.queries.warm_up(wait=True, timeout=60)
    assert threading.current_thread().name not in e.load_threads
    assert e._session is not None
    mem.close()


def test_missing_model_files_are_a_memtap_error():
    from memtap_minilm.embedder import ModelFilesMissingError

    assert issubclass(ModelFilesMissingError, memtap.MemtapError)
    assert issubclass(ModelFilesMissingError, RuntimeError)
