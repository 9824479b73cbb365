"""The model runs its int8 weights as int8 (``memtap_minilm.int8``): derived once per
machine into the cache, vectors in the float path's space, processes that build it at
once each get a whole file, and a build that cannot be made leaves the shipped model."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from memtap.sdk import STALE_WORK_SECONDS
from memtap.testing import paraphrases
from memtap_minilm import cache, int8, quick
from memtap_minilm.embedder import MiniLMEmbedder, model_path


@pytest.fixture(scope="module")
def both() -> tuple[MiniLMEmbedder, MiniLMEmbedder]:
    fast, shipped = MiniLMEmbedder(), MiniLMEmbedder(int8_matmul=False)
    fast.load()
    shipped.load()
    return fast, shipped


def _op_types(path: Path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}


def test_the_model_that_runs_multiplies_int8_and_is_kept_in_the_cache(both, quick_table_cache):
    fast, shipped = both
    derived = fast.runtime_model()
    assert derived == int8.derived_path(model_path())
    assert derived.parent == quick_table_cache and derived.is_file()
    ops = _op_types(derived)
    # Every weight product is an integer one; only the attention's products of two
    # activations stay in float.
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    assert shipped.runtime_model() == model_path()
    # The quick table is the rows of the model that runs, named for it.
    digest = cache.model_digest(model_path())
    assert fast._quick_table().directory.name.endswith(f"{digest}-int8-{int8.FORMAT}")
    assert shipped._quick_table().directory.name.endswith(digest)


def test_a_process_hashes_the_shipped_model_once_and_never_the_derived_one(tmp_path, monkeypatch):
    """Both derived files are named by the shipped model's digest (~40 ms to hash), which
    a process computes once; the derived model (as large) is never hashed."""
    monkeypatch.setenv("MEMTAP_CACHE", str(tmp_path))
    for module, name in ((int8, "_built"), (cache, "_digests"), (quick, "_tables")):
        monkeypatch.setattr(module, name, {})
    hashed: list[Path] = []
    opened = Path.open

    def spying_open(self, *args, **kwargs):
        if args[:1] == ("rb",):
            hashed.append(self)
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spying_open)
    embedder = MiniLMEmbedder()
    embedder._quick_table()
    embedder.load()
    MiniLMEmbedder()._quick_table()
    assert int8.derived_path(model_path()).is_file()
    assert hashed == [model_path()]


def test_vectors_stay_in_the_float_paths_space_and_find_as_much(both):
    """The whole point is speed: what recall finds must not move. The paraphrase set's
    questions (no content word shared with their facts), among all its facts (answers and
    the traps beside them): at most two of the 120 fewer found at 1, 5 or 10 than with
    the float path (measured: R@1 0.617 / 0.575, R@5 0.958 / 0.967, R@10 0.975 / 0.983)."""
    fast, shipped = both
    facts = paraphrases.facts()
    asked = paraphrases.questions()
    answer = [facts.index(fact) for _, fact in asked]
    found: dict[str, dict[int, int]] = {}
    for name, embedder in (("int8", fast), ("float", shipped)):
        fact_vectors = embedder.embed(facts)
        question_vectors = embedder.embed([question for question, _ in asked])
        alike = (fact_vectors @ question_vectors.T).T
        ranks = [int((row > row[gold]).sum()) for row, gold in zip(alike, answer)]
        found[name] = {k: sum(rank < k for rank in ranks) for k in (1, 5, 10)}
        if name == "int8":
            same_text = (fact_vectors * shipped.embed(facts)).sum(axis=1)
            assert same_text.min() > 0.95 and float(np.median(same_text)) > 0.985
    for k in (1, 5, 10):
        assert found["int8"][k] >= found["float"][k] - 2, found


_BUILD = """
import sys
from pathlib import Path
from memtap_minilm import cache, int8, quick
from memtap_minilm.embedder import model_path
print(int8.runtime_model(model_path()))
"""


def test_processes_that_build_at_once_each_publish_a_whole_model(tmp_path):
    env = {**os.environ, "MEMTAP_CACHE": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _BUILD], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    paths = {proc.communicate(timeout=300)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert len(paths) == 1
    built = Path(paths.pop())
    assert built == tmp_path / int8.derived_path(model_path()).name
    assert "MatMulInteger" in _op_types(built)
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no work files left behind
    # A model that loads and runs.
    import onnxruntime as ort

    session = ort.InferenceSession(str(built), providers=["CPUExecutionProvider"])
    ids = np.array([[101, 7592, 102]], np.int64)
    out = session.run(
        None, {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": ids * 0}
    )
    assert out[0].shape == (1, 3, 384)


def test_a_model_that_cannot_be_built_leaves_the_shipped_one_and_says_so(tmp_path, monkeypatch, caplog):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("MEMTAP_CACHE", str(blocked))
    monkeypatch.setattr(int8, "_built", {})
    with caplog.at_level(logging.WARNING, logger="memtap.minilm"):
        embedder = MiniLMEmbedder(quick_queries=False)
        assert embedder.runtime_model() == model_path()
        vector = embedder.embed(["my dog is a beagle"])[0]
    assert abs(float(vector @ vector) - 1) < 1e-4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unquantized" in warnings[0], warnings
    # Asked again in the same process: the same answer, not a second try and warning.
    assert MiniLMEmbedder(quick_queries=False).runtime_model() == model_path()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_build_removes_what_dead_builds_left_and_logs_one_line(tmp_path, monkeypatch, caplog):
    """A process killed while writing the model leaves its work file; the next build
    removes it, not one a live build is writing."""
    monkeypatch.setenv("MEMTAP_CACHE", str(tmp_path))
    dead, live = tmp_path / ".model.onnx.dead.work", tmp_path / ".model.onnx.live.work"
    for work in (dead, live):
        work.write_bytes(b"partial")
    hours_ago = time.time() - STALE_WORK_SECONDS - 60
    os.utime(dead, (hours_ago, hours_ago))
    with caplog.at_level(logging.DEBUG):
        int8.build(model_path(), tmp_path / "model.onnx")
    assert not dead.exists() and live.is_file()
    assert [r.name for r in caplog.records] == ["memtap.minilm"], [r.getMessage() for r in caplog.records][:5]


def test_the_rewrite_makes_what_onnxruntimes_own_dynamic_quantization_makes(tmp_path):
    """``memtap_minilm.int8`` rewrites the graph by hand rather than with
    ``onnxruntime.quantization.quantize_dynamic`` (which needs the model folded to float
    first and derives the int8 weights again, ~6 s). The claim that makes that safe: the
    shipped weights are what it would derive, so both models give the same vectors."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = tmp_path / "folded.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(folded)
    ort.InferenceSession(str(model_path()), options, providers=["CPUExecutionProvider"])
    theirs = tmp_path / "theirs.onnx"
    quantize_dynamic(
        str(folded),
        str(theirs),
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        weight_type=QuantType.QInt8,
    )
    ours = tmp_path / "ours.onnx"
    int8.build(model_path(), ours)
    rng = np.random.default_rng(3)
    for length in (3, 17, 64):
        ids = np.concatenate([[101], rng.integers(2000, 29000, length - 2), [102]])[None, :].astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": ids * 0}
        mine, reference = (
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            for path in (ours, theirs)
        )
        assert np.abs(mine - reference).max() < 1e-4, length


def test_the_model_is_readable_by_every_user(tmp_path, monkeypatch):
    """An image built by one user and run by another reads the model the first derived."""
    monkeypatch.setenv("MEMTAP_CACHE", str(tmp_path))
    monkeypatch.setattr(int8, "_built", {})
    built = int8.runtime_model(model_path())
    assert built.parent == tmp_path
    assert built.stat().st_mode & 0o777 == 0o644


def test_a_damaged_model_in_the_cache_is_built_again(tmp_path, monkeypatch, caplog):
    """Files are published whole, so one that does not load was damaged on disk: it is
    built again, and the int8 model runs."""
    monkeypatch.setenv("MEMTAP_CACHE", str(tmp_path))
    monkeypatch.setattr(int8, "_built", {})
    derived = int8.derived_path(model_path())
    derived.write_bytes(b"not an onnx model")
    with caplog.at_level(logging.WARNING, logger="memtap.minilm"):
        embedder = MiniLMEmbedder(quick_queries=False)
        vectors = embedder.embed(["my dog is a beagle", "what dog do I have?"])
    assert embedder._running == derived and "MatMulInteger" in _op_types(derived)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    assert float(vectors[0] @ vectors[1]) > 0.5
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "building it again" in warnings[0], warnings


def test_a_model_that_does_not_load_when_built_again_leaves_the_shipped_one(tmp_path, monkeypatch, caplog):
    """Built again and still not loading: the shipped model runs, is the runtime model
    from then on (a quick table is named for it), and a quick table already named for the
    derived one refuses to be built from the shipped model's rows."""
    monkeypatch.setenv("MEMTAP_CACHE", str(tmp_path))
    monkeypatch.setattr(int8, "_built", {})
    monkeypatch.setattr(quick, "_tables", {})
    monkeypatch.setattr(int8, "build", lambda source, target: target.write_bytes(b"damaged again"))
    named_before = MiniLMEmbedder()
    assert named_before._quick_table().directory.name.endswith(f"-int8-{int8.FORMAT}")
    with caplog.at_level(logging.WARNING, logger="memtap.minilm"):
        embedder = MiniLMEmbedder(quick_queries=False)
        vector = embedder.embed(["my dog is a beagle"])[0]
    assert embedder._running == model_path() and abs(float(vector @ vector) - 1) < 1e-4
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "unquantized" in warnings[1], warnings
    assert MiniLMEmbedder().runtime_model() == model_path()
    assert MiniLMEmbedder()._quick_table().directory.name.endswith(cache.model_digest(model_path()))
    named_before.load()
    with pytest.raises(RuntimeError, match="quick table is for"):
        named_before._run_pooled(np.array([[101, 102]]), np.array([[1, 1]]))
