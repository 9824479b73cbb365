"""The model onnxruntime runs: the shipped int8 weights, multiplied as int8.

The shipped file keeps MiniLM's weights as int8 with a scale per output column, and its
graph turns them back into floats (``Cast``, ``Mul``) before float ``MatMul`` nodes.
onnxruntime folds those into float32 constants as it loads the model, so every run reads
~42 MB of float weights and multiplies in float32: on this project's 2-core machine ~4 ms
for a run of three tokens, and ~0.25 ms more per token (docs/benchmarks.md, "The embedding
model's int8 weights, multiplied as int8").

:func:`runtime_model` derives, once per machine, a model whose ``MatMul`` nodes take those
weights as int8 and quantize their input per run (onnxruntime's dynamic quantization,
``MatMulInteger``): 1.85x as many texts a second here (LongMem's turns; less for short
texts), with vectors 0.994 alike (median cosine) to the float path's. It is built with
onnxruntime's own quantization tool (``onnxruntime.quantization.quantize_dynamic``, weights
per channel as shipped) from the model onnxruntime folded, in ~3 s, and kept beside the
quick table in the cache directory (:func:`memtap_minilm.quick.cache_dir`), named by the
shipped model's digest. Processes that build it at once each write their own file and
publish it by an atomic rename.

When it cannot be built (no ``onnx`` package, a read-only cache, a model of another
shape) the shipped model is run as it is, and that is logged once.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from .quick import cache_dir, model_digest
from .runtime import import_onnxruntime

log = logging.getLogger("memtap.minilm")

#: Bumped when the derived model changes for the same shipped one.
FORMAT = 1
#: A build's work directory (~90 MB while it runs) older than this was left by a process
#: that died building; the next build removes it.
STALE_WORK_SECONDS = 3600.0
_WORK_PREFIX = ".minilm-int8-"

_lock = threading.Lock()
_built: dict[Path, Path] = {}


def derived_path(source: Path) -> Path:
    """Where the int8 model derived from ``source`` is kept."""
    return cache_dir() / f"minilm-int8-matmul-{FORMAT}-{model_digest(source)}.onnx"


def runtime_model(source: Path) -> Path:
    """The model to run for ``source``: its int8 derivation (built now when this machine
    has none, ~3 s), else ``source`` itself when that cannot be built."""
    with _lock:
        known = _built.get(source)
        if known is not None:
            return known
        try:
            target = derived_path(source)
            if not target.is_file():
                build(source, target)
            chosen = target
        except Exception as exc:  # fail open: the shipped model runs, only slower
            log.warning("memtap-minilm runs its model unquantized (%s: %s)", type(exc).__name__, exc)
            chosen = source
        _built[source] = chosen
        return chosen


class _QuietQuantizer(logging.Filter):
    """Drops what ``quantize_dynamic`` logs on the root logger from the building thread
    (a line per tensor, and advice to pre-process the model): memtap logs the build."""

    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


def build(source: Path, target: Path) -> None:
    """Write ``target``: ``source`` folded by onnxruntime (its int8 weights become float
    constants), then dynamically quantized, ``MatMul`` nodes only, int8 weights per
    channel."""
    ort = import_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_work(target.parent)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=_WORK_PREFIX) as work:
        folded = Path(work) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quantized = Path(work) / "model.onnx"
        quiet = _QuietQuantizer()
        logging.getLogger().addFilter(quiet)
        try:
            quantize_dynamic(
                str(folded),
                str(quantized),
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                weight_type=QuantType.QInt8,
            )
        finally:
            logging.getLogger().removeFilter(quiet)
        os.replace(quantized, target)
    log.info("memtap-minilm: built %s", target)


def _remove_stale_work(directory: Path) -> None:
    """Remove the work directories of builds that died (older than
    :data:`STALE_WORK_SECONDS`); one still running is younger."""
    cutoff = time.time() - STALE_WORK_SECONDS
    for work in directory.glob(_WORK_PREFIX + "*"):
        try:
            if work.is_dir() and work.stat().st_mtime < cutoff:
                shutil.rmtree(work, ignore_errors=True)
        except OSError:  # removed meanwhile by another process
            continue
