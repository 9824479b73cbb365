"""The cache directory the embedder keeps derived files in, and what names them.

Two things are derived from the installed model once per machine and kept here: the
model onnxruntime runs (:mod:`memtap_minilm.int8`) and the quick query table
(:mod:`memtap_minilm.quick`). Both are written by processes that may run at once and may
be killed mid-write, so both go through ``memtap.sdk``'s :func:`publish_atomically` (readers
see a whole file or none) and :func:`remove_stale_work` (what a killed writer left is
removed by a later one), and both are named by :func:`model_digest` of the
shipped model, hashed once per process.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

#: The environment variable that names the cache directory.
CACHE_ENV = "MEMTAP_CACHE"

_digests: dict[tuple[Path, int, int], str] = {}
_digests_lock = threading.Lock()


def cache_dir() -> Path:
    """Where derived model files are kept: ``$MEMTAP_CACHE``, else
    ``$XDG_CACHE_HOME/memtap``, else ``~/.cache/memtap``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "memtap"


def model_digest(path: Path) -> str:
    """A short digest of the file at ``path`` (a new model never reuses what was derived
    from an old one). Hashed once per process for a file of the same size and time
    (the model is ~23 MB: ~40 ms)."""
    stat = path.stat()
    key = (path, stat.st_size, stat.st_mtime_ns)
    with _digests_lock:
        known = _digests.get(key)
        if known is None:
            h = hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            known = _digests[key] = h.hexdigest()[:16]
        return known
