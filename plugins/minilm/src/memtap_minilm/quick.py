"""Quick query vectors: a static token table distilled from MiniLM itself.

Running MiniLM on a short query costs 2-6 ms on a 2-core machine, which is more than the
whole budget recall has on a request path. Documents are embedded in the background, so
only the query needs a shortcut. The shortcut is a table with one row per vocabulary
token: MiniLM's own output for the sequence ``[CLS] token [SEP]`` (mean-pooled, the way
sentences are pooled). A query's vector is the weighted mean of its tokens' rows, minus
half the table's mean row (the direction every token shares, which otherwise drowns the
differences), normalised: about 50-100 µs, and in the *same vector space* as the stored
MiniLM vectors, so nothing stored changes. On LOCOMO it keeps most of what the full query
embedding adds over words alone (``docs/benchmarks.md``).

A token weighs by how rare it is (:func:`token_weights`): ``r / (r + ZIPF_HALF)`` for the
token of frequency rank ``r``, so "the", "my" or "?" count for little beside "beagle".
The full model learns that from context; a mean of token rows cannot, and without the
weights its vectors lean toward a sentence's function words. No word counts are needed:
a WordPiece vocabulary lists its tokens most frequent first (after its special and
single-character entries), so the rank is the token's place in it. The weights are
applied as the table is loaded; the table on disk is the model's rows alone.

The same idea, with more training, is what Model2Vec publishes; here the table is made
from the installed model on first use (~30,000 short sequences, ~20 s of one core, in a
background thread, in chunks saved as they finish so short-lived processes add up), and
kept under the cache directory (``$MEMTAP_CACHE``, else ``$XDG_CACHE_HOME/memtap``, else
``~/.cache/memtap``) for every later process. Until it is complete, :meth:`vector`
returns ``None`` and recall embeds the query with the full model.

Processes that start at once share the build through the directory alone: a chunk is made
by whoever takes its lock file (which names its holder), every file is published whole by
an atomic rename, and the first to see all chunks assembles the table and removes them.
A build waiting for others looks again every :data:`POLL_SECONDS` and loads the table as
soon as one is published; it makes a chunk itself when the lock's holder has died (a
process of this host no longer running, else a lock older than :data:`STALE_LOCK_SECONDS`),
and makes again a file that cannot be read whole.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from memtap.sdk import InterpreterExiting, lower_priority, native_work, publish_atomically, remove_stale_work

from .cache import cache_dir

log = logging.getLogger("memtap.minilm")

#: Tokens per chunk file (a chunk is the unit of progress saved to disk).
CHUNK_TOKENS = 2048
#: Tokens per model run while building (small, so stopping at exit is quick).
BATCH_TOKENS = 128
#: Share of the table's mean row removed from a query vector.
CENTERING = 0.5
#: The frequency rank at which a token weighs half as much as the rarest ones
#: (:func:`token_weights`). Chosen on the tuning half of ``benchmarks/longmem`` (dense
#: ranking by quick query vectors against full-model facts, R@10: uniform weights 0.868;
#: ranks halved at 100 / 300 / 1,000: 0.915 / 0.919 / 0.919; quick against quick 0.841 →
#: 0.868 / 0.876 / 0.852), then checked once on its held-out half (docs/benchmarks.md).
ZIPF_HALF = 300.0
#: A build lock older than this is considered abandoned (sooner when it names a process
#: of this host that no longer runs).
STALE_LOCK_SECONDS = 600.0
#: How often a build waiting for chunks other processes make looks at the directory again.
POLL_SECONDS = 0.2
_FORMAT = "v1"
_HOST = socket.gethostname()


def first_word_id(vocab: Mapping[str, int]) -> int | None:
    """The id of the first word of a WordPiece vocabulary (the first entry of two letters
    or more: before it come special, unused and single-character tokens), or ``None``
    when it has none."""
    ids = [i for token, i in vocab.items() if len(token) > 1 and token.isalpha()]
    return min(ids) if ids else None


def token_weights(vocab_size: int, first_word: int | None) -> np.ndarray[Any, np.dtype[np.float32]] | None:
    """Each token's weight in a quick vector, for a vocabulary listed most frequent first
    from ``first_word`` on: ``r / (r + ZIPF_HALF)`` with ``r`` the token's rank from there
    (1 for the first word and for every entry before it). ``None`` (every token weighs
    the same) without a ``first_word``."""
    if first_word is None:
        return None
    rank = np.maximum(np.arange(vocab_size, dtype=np.float64) - (first_word - 1), 1.0)
    return (rank / (rank + ZIPF_HALF)).astype(np.float32)


class QuickQueryTable:
    """The static token table of one model: built in the background, saved in chunks.

    ``run(ids, mask)`` runs the model and returns mean-pooled rows; ``vocab_size`` is the
    tokenizer's; ``first_word`` the id of its first word (:func:`first_word_id`: tokens
    then weigh by their rank, :func:`token_weights`; ``None``: all alike). Use
    :func:`table_for` to share one table per model and process.
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
        first_word: int | None = None,
    ) -> None:
        self.directory = directory
        self.special = special
        self.chunk_tokens = chunk_tokens
        self.batch_tokens = batch_tokens
        self.vocab_size = vocab_size
        self.dim = dim
        self._run = run
        #: float16 rows (23 MB for MiniLM's vocabulary), each times its token's weight; a
        #: query's few rows are widened.
        self._table: np.ndarray[Any, np.dtype[np.float16]] | None = None
        self._weights = token_weights(vocab_size, first_word)
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
        weights = self._weights
        v *= np.float32(1 / (float(weights[ids].sum()) if weights is not None else len(ids)))
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
            thread = threading.Thread(target=self._build, name="memtap-quick-table", daemon=True)
            thread.start()
            # Seen by other threads once started: a wait that comes meanwhile takes the
            # lock above and finds it, rather than joining a thread not started yet.
            self._thread = thread
            atexit.register(self.stop)

    def wait(self, timeout: float | None = None) -> bool:
        """Start if needed and wait until the table is ready; ``False`` on timeout, error,
        or a build that stopped."""
        self.start()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)  # a build ends with the table, an error or a stop
        return self._table is not None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a build (what is finished stays on disk) and wait for its thread: a model
        still running at interpreter exit can abort the process."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _load(self) -> bool:
        table = self._read(self.table_path, self.vocab_size)
        if table is None:
            return False
        self._install(table.astype(np.float16))
        return True

    def _read(self, path: Path, rows: int) -> np.ndarray[Any, Any] | None:
        """The ``rows`` x ``dim`` array saved at ``path``; ``None`` when there is none, or
        when it is damaged (removed then, to be made again: files are published whole, so
        one that cannot be read whole was cut short by a crash or came from elsewhere)."""
        try:
            array = np.load(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            array = exc
        if isinstance(array, np.ndarray) and array.shape == (rows, self.dim):
            return array
        log.warning("memtap-minilm: %s is damaged (%s); making it again", path, array)
        path.unlink(missing_ok=True)
        return None

    def _install(self, table: np.ndarray[Any, np.dtype[np.float16]]) -> None:
        """Use ``table`` (the model's rows, as saved): its centre, then its rows weighted."""
        self._center = (CENTERING * table.mean(axis=0, dtype=np.float32)).astype(np.float32)
        weights = self._weights
        if weights is not None:
            weighted = np.empty_like(table)
            for start in range(0, len(table), self.chunk_tokens):  # no float32 copy of it all
                part = slice(start, start + self.chunk_tokens)
                weighted[part] = table[part].astype(np.float32) * weights[part, None]
            table = weighted
        self._table = table
        self.ready.set()

    def _build(self) -> None:
        lower_priority()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Each round looks again at what is on disk, since other processes work on the
            # same directory: the table one of them published (load it), chunks nobody is
            # making (make them), chunks a live process is making (wait for them).
            while not self._stop.is_set():
                if self._load():
                    return
                if self._make_chunks():
                    table = self._gather()
                    if table is not None:
                        self._publish(self.table_path, table)
                        self._remove_chunks()
                        self._install(table)
                        return
                self._stop.wait(POLL_SECONDS)
        except BaseException as exc:
            log.warning(
                "memtap-minilm could not build its quick query table (%s); queries use the full model", exc
            )
            self.error = exc
            self.ready.set()

    def _make_chunks(self) -> bool:
        """Make every missing chunk no live process is making; ``True`` when all are on
        disk, ``False`` when some are still being made elsewhere, the table appeared, or
        the build was stopped."""
        complete = True
        for index in range(self.chunks):
            if self._stop.is_set() or self.table_path.exists():
                return False
            path = self._chunk_path(index)
            if path.exists():
                continue
            lock = path.with_suffix(".lock")
            if not self._claim(lock):
                complete = False  # another process is making this chunk
                continue
            try:
                if path.exists():  # finished by its maker between our two looks
                    continue
                rows = self._make_chunk(index)
                if rows is None:
                    return False
                self._publish(path, rows)
            finally:
                lock.unlink(missing_ok=True)
        return complete

    def _claim(self, lock: Path) -> bool:
        """Take the lock file of a chunk, writing who holds it; ``False`` while its holder
        may still be at work (see :meth:`_held`)."""
        for _ in range(2):  # once more after removing an abandoned lock
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if self._held(lock):
                    return False
                # Two processes may both judge it abandoned and both make the chunk: the
                # same rows, published atomically, so that only costs time.
                lock.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(f"{_HOST} {os.getpid()}")
            return True
        return False

    @staticmethod
    def _held(lock: Path) -> bool:
        """Whether a lock's holder may still be at work: a process of this host that still
        runs, else (another host, a holder not written yet) a lock younger than
        :data:`STALE_LOCK_SECONDS`."""
        try:
            fresh = time.time() - lock.stat().st_mtime < STALE_LOCK_SECONDS
            host, _, pid = lock.read_text().partition(" ")
        except FileNotFoundError:
            return False
        except (OSError, UnicodeDecodeError):
            return True
        if fresh and host == _HOST and pid.isdigit():
            return _running(int(pid))
        return fresh

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
            try:
                with native_work():  # the interpreter's exit waits for the model's run
                    rows[first - start : first - start + len(ids)] = self._run(seq, np.ones_like(seq))
            except InterpreterExiting:
                return None
        return rows

    def _gather(self) -> np.ndarray[Any, np.dtype[np.float16]] | None:
        """The chunks joined into the table, or ``None`` when one has gone (another process
        assembled the table and removed them) or was damaged."""
        parts = []
        for index in range(self.chunks):
            rows = min(self.chunk_tokens, self.vocab_size - index * self.chunk_tokens)
            part = self._read(self._chunk_path(index), rows)
            if part is None:
                return None
            parts.append(part)
        return np.concatenate(parts).astype(np.float16)

    def _publish(self, path: Path, array: np.ndarray[Any, Any]) -> None:
        """Write ``array`` to ``path`` whole (:func:`memtap.sdk.publish_atomically`)."""
        publish_atomically(path, lambda f: np.save(f, array))

    def _remove_chunks(self) -> None:
        """Remove the chunks (the table has them now) and what killed processes left."""
        for i in range(self.chunks):
            self._chunk_path(i).unlink(missing_ok=True)
        remove_stale_work(self.directory)


def _running(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (``True`` when it cannot be told)."""
    if os.name != "posix":
        return True  # os.kill(pid, 0) would terminate it on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


_tables: dict[Path, QuickQueryTable] = {}
_tables_lock = threading.Lock()


def table_for(
    model_key: str,
    vocab_size: int,
    dim: int,
    run: Any,
    special: tuple[int, int],
    first_word: int | None = None,
) -> QuickQueryTable:
    """The process's one table for the model named ``model_key`` (a digest of the files it
    comes from: built or loaded on first use). ``run(ids, mask)`` returns mean-pooled model
    outputs; ``special`` is the ([CLS], [SEP]) ids; ``first_word`` the vocabulary's first
    word (:func:`first_word_id`)."""
    with _tables_lock:
        directory = cache_dir() / f"minilm-quick-{_FORMAT}-{model_key}"
        table = _tables.get(directory)
        if table is None:
            table = _tables[directory] = QuickQueryTable(
                directory, vocab_size, dim, run, special, first_word=first_word
            )
        return table
