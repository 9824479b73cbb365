"""Quick query vectors: a static token table distilled from MiniLM itself.

Running MiniLM on a short query costs 4-9 ms on a 2-core machine, which is more than the
whole budget recall has on a request path. Documents are embedded in the background, so
only the query needs a shortcut. The shortcut is a table with one row per vocabulary
token: MiniLM's own output for the sequence ``[CLS] token [SEP]`` (mean-pooled, the way
sentences are pooled). A query's vector is the mean of its tokens' rows, minus half the
table's mean row (the direction every token shares, which otherwise drowns the
differences), normalised: about 50 µs, and in the *same vector space* as the stored
MiniLM vectors, so nothing stored changes. On LOCOMO it keeps most of what the full query
embedding adds over words alone (``docs/benchmarks.md``).

The same idea, with more training, is what Model2Vec publishes; here the table is made
from the installed model on first use (~30,000 short sequences, ~45 s of one core, in a
background thread, in chunks saved as they finish so short-lived processes add up), and
kept under the cache directory (``$MEMTAP_CACHE``, else ``$XDG_CACHE_HOME/memtap``, else
``~/.cache/memtap``) for every later process. Until it is complete, :meth:`vector`
returns ``None`` and recall embeds the query with the full model.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from memtap.sdk import lower_priority

log = logging.getLogger("memtap.minilm")

CACHE_ENV = "MEMTAP_CACHE"
#: Tokens per chunk file (a chunk is the unit of progress saved to disk).
CHUNK_TOKENS = 2048
#: Tokens per model run while building (small, so stopping at exit is quick).
BATCH_TOKENS = 128
#: Share of the table's mean row removed from a query vector.
CENTERING = 0.5
#: A build lock older than this is considered abandoned.
STALE_LOCK_SECONDS = 600.0
_FORMAT = "v1"


def cache_dir() -> Path:
    """Where derived model files are kept."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "memtap"


def model_digest(path: Path) -> str:
    """A short digest of the model file (a new model never reuses an old table)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


class QuickQueryTable:
    """The static token table of one model: built in the background, saved in chunks.

    ``run(ids, mask)`` runs the model and returns mean-pooled rows; ``vocab_size`` is the
    tokenizer's. Use :func:`table_for` to share one table per model and process.
    """

    def __init__(
        self,
        directory: Path,
        vocab_size: int,
        dim: int,
        run: Any,
        special: tuple[int, int],
        *,
        chunk_tokens: int = CHUNK_TOKENS,
        batch_tokens: int = BATCH_TOKENS,
    ) -> None:
        self.directory = directory
        self.special = special
        self.chunk_tokens = chunk_tokens
        self.batch_tokens = batch_tokens
        self.vocab_size = vocab_size
        self.dim = dim
        self._run = run
        #: float16 rows (23 MB for MiniLM's vocabulary); a query's few rows are widened.
        self._table: np.ndarray[Any, np.dtype[np.float16]] | None = None
        self._center: np.ndarray[Any, np.dtype[np.float32]] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None

    @property
    def chunks(self) -> int:
        """How many chunk files make the table."""
        return -(-self.vocab_size // self.chunk_tokens)

    def _chunk_path(self, index: int) -> Path:
        return self.directory / f"chunk-{index:03d}.npy"

    @property
    def table_path(self) -> Path:
        """The finished table (float16, one row per token)."""
        return self.directory / "table.npy"

    def vector(self, ids: list[int]) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        """The quick vector of a token-id sequence (no special tokens), or ``None`` while
        the table is not ready (a build is started then)."""
        table = self._table
        if table is None:
            self.start()
            return None
        if not ids:
            return None
        assert self._center is not None
        v = table[ids].sum(axis=0, dtype=np.float32)
        v *= np.float32(1 / len(ids))
        v -= self._center
        norm = math.sqrt(float(v @ v))
        return v / np.float32(norm) if norm else None

    def start(self) -> None:
        """Load the finished table, or start building it in a background thread."""
        if self._table is not None or self._thread is not None:
            return
        with self._lock:
            if self._table is not None or self._thread is not None:
                return
            if self._load():
                return
            self._thread = threading.Thread(target=self._build, name="memtap-quick-table", daemon=True)
            self._thread.start()
            atexit.register(self.stop)

    def wait(self, timeout: float | None = None) -> bool:
        """Start if needed and wait until the table is ready; ``False`` on timeout or error."""
        self.start()
        return self.ready.wait(timeout) and self.error is None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a build (what is finished stays on disk) and wait for its thread: a model
        still running at interpreter exit can abort the process."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _load(self) -> bool:
        try:
            table = np.load(self.table_path)
        except (OSError, ValueError):
            return False
        if table.shape != (self.vocab_size, self.dim):
            return False
        self._install(table.astype(np.float16))
        return True

    def _install(self, table: np.ndarray[Any, np.dtype[np.float16]]) -> None:
        self._center = (CENTERING * table.astype(np.float32).mean(axis=0)).astype(np.float32)
        self._table = table
        self.ready.set()

    def _build(self) -> None:
        lower_priority()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for index in range(self.chunks):
                if self._stop.is_set():
                    return
                path = self._chunk_path(index)
                if path.exists():
                    continue
                lock = path.with_suffix(".lock")
                if not self._claim(lock):
                    continue  # another process is making this chunk
                try:
                    rows = self._make_chunk(index)
                    if rows is None:
                        return
                    partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
                    np.save(partial, rows)
                    os.replace(partial, path)
                finally:
                    lock.unlink(missing_ok=True)
            self._assemble()
        except BaseException as exc:
            log.warning(
                "memtap-minilm could not build its quick query table (%s); queries use the full model", exc
            )
            self.error = exc
            self.ready.set()

    def _claim(self, lock: Path) -> bool:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime < STALE_LOCK_SECONDS:
                    return False
            except FileNotFoundError:
                pass
            lock.unlink(missing_ok=True)
            return self._claim(lock)
        os.close(fd)
        return True

    def _make_chunk(self, index: int) -> np.ndarray[Any, np.dtype[np.float16]] | None:
        start = index * self.chunk_tokens
        stop = min(start + self.chunk_tokens, self.vocab_size)
        rows = np.zeros((stop - start, self.dim), np.float16)
        for first in range(start, stop, self.batch_tokens):
            if self._stop.is_set():
                return None
            ids = np.arange(first, min(first + self.batch_tokens, stop), dtype=np.int64)
            cls, sep = self.special
            seq = np.stack([np.full(len(ids), cls), ids, np.full(len(ids), sep)], axis=1)
            rows[first - start : first - start + len(ids)] = self._run(seq, np.ones_like(seq))
        return rows

    def _assemble(self) -> None:
        # Chunks made by other processes may still be missing: wait for them (bounded).
        deadline = time.monotonic() + STALE_LOCK_SECONDS
        while not all(self._chunk_path(i).exists() for i in range(self.chunks)):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            time.sleep(1.0)
        table = np.concatenate([np.load(self._chunk_path(i)) for i in range(self.chunks)])
        partial = self.table_path.with_name(f"table.{os.getpid()}.tmp.npy")
        np.save(partial, table)
        os.replace(partial, self.table_path)
        for i in range(self.chunks):
            self._chunk_path(i).unlink(missing_ok=True)
        self._install(table.astype(np.float16))


_tables: dict[Path, QuickQueryTable] = {}
_tables_lock = threading.Lock()


_digests: dict[Path, str] = {}


def table_for(model: Path, vocab_size: int, dim: int, run: Any, special: tuple[int, int]) -> QuickQueryTable:
    """The process's one table for ``model`` (built or loaded on first use). ``run(ids,
    mask)`` returns mean-pooled model outputs; ``special`` is the ([CLS], [SEP]) ids."""
    with _tables_lock:
        digest = _digests.get(model) or _digests.setdefault(model, model_digest(model))
        directory = cache_dir() / f"minilm-quick-{_FORMAT}-{digest}"
        table = _tables.get(directory)
        if table is None:
            table = _tables[directory] = QuickQueryTable(directory, vocab_size, dim, run, special)
        return table
