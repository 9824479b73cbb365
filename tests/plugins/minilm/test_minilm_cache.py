"""The cache's files (``memtap_minilm.cache``): named by the shipped model's digest, hashed
once per process. (They are published whole by ``memtap.sdk.publish_atomically``:
``tests/core/test_wholefile.py``.)"""

from __future__ import annotations

from memtap_minilm import cache


def test_a_file_is_hashed_once_until_it_changes(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"one")
    first = cache.model_digest(model)
    assert cache.model_digest(model) == first
    model.write_bytes(b"two, longer")
    assert cache.model_digest(model) != first
