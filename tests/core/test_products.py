"""memtap's vector products stay in the calling thread (issue 37): numpy's OpenBLAS runs a
larger product on helper threads that then spin, and over a soak they burned ~2.8 ms of
the other core per captured exchange."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from memtap.longterm import products

np = pytest.importorskip("numpy")


@pytest.mark.parametrize("rows", [0, 1, 7, 340, 5000])
def test_rows_dot_is_the_matrix_vector_product(rows):
    rng = np.random.default_rng(rows)
    matrix = rng.normal(size=(rows, 384)).astype(np.float32)
    vector = rng.normal(size=384).astype(np.float32)
    assert np.allclose(products.rows_dot(matrix, vector), matrix @ vector, atol=1e-4)
    out = np.full(rows, 9.0, np.float32)
    assert products.rows_dot(matrix, vector, out=out) is out
    assert np.allclose(out, matrix @ vector, atol=1e-4)


@pytest.mark.parametrize(("rows", "columns"), [(0, 3), (1, 256), (64, 256), (60, 60), (3, 1)])
def test_product_is_the_matrix_product(rows, columns):
    rng = np.random.default_rng(rows * 1000 + columns)
    left = rng.normal(size=(rows, 384)).astype(np.float32)
    right = rng.normal(size=(columns, 384)).astype(np.float32).T  # not contiguous, as a gram's
    assert np.allclose(products.product(left, right), left @ right, atol=1e-4)


def test_every_piece_handed_to_blas_is_below_the_limit(monkeypatch):
    sizes = []
    real = np.matmul

    def recording(a, b, out=None):
        depth = a.shape[-1]
        columns = 1 if b.ndim == 1 else b.shape[1]
        sizes.append(a.shape[0] * depth * columns)
        return real(a, b, out=out)

    monkeypatch.setattr(np, "matmul", recording)
    rng = np.random.default_rng(5)
    products.rows_dot(rng.normal(size=(9000, 384)).astype(np.float32), np.ones(384, np.float32))
    products.product(rng.normal(size=(70, 384)).astype(np.float32), np.ones((384, 256), np.float32))
    assert sizes and max(sizes) <= products.MAX_WORK


# A fresh interpreter, so that no other test's threads are counted: index searches and
# vector sketches like a busy process's, then how much CPU went to threads other than
# the one doing them.
_PROBE = textwrap.dedent(
    """
    import datetime, time
    import numpy as np
    from memtap.longterm.index import EntityIndex, sketch_of
    from memtap.protocol.model import Fact

    rng = np.random.default_rng(0)
    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    facts = [Fact(entity_id="e", text=f"note {i} about topic {i % 50}",
                  created_at=t0 + datetime.timedelta(minutes=i)) for i in range(3000)]
    vecs = rng.normal(size=(3000, 384)).astype(np.float32)
    index = EntityIndex()
    index.add(facts, {f.id: v for f, v in zip(facts, vecs)})
    own = time.thread_time(); everything = time.process_time()
    for i in range(150):
        sketch_of(vecs[i : i + 16])
        index.search(f"topic {i % 50}", vecs[i], k=60)
        time.sleep(0.002)  # calls come apart, as a process's do
    own = time.thread_time() - own
    print(own, time.process_time() - everything - own)
    """
)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a BLAS uses one thread on one core")
def test_searching_and_sketching_keep_the_other_cores_idle():
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    own, others = map(float, done.stdout.split())
    # Before: the other threads took 3-10x what the searching thread did (OpenBLAS spinning
    # after each product above its threshold); now only the interpreter's own leftovers.
    assert others < 0.1 * own + 0.02, (own, others)
