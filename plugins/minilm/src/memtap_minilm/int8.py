"""The model onnxruntime runs: the shipped int8 weights, multiplied as int8.

The shipped file keeps MiniLM's weights as int8 with a scale per output column, and its
graph turns them back into floats (``Cast``, ``Mul``) before float ``MatMul`` nodes.
onnxruntime folds those into float32 constants as it loads the model, so every run reads
~42 MB of float weights and multiplies in float32: on this project's 2-core machine ~4 ms
for a run of three tokens, and ~0.2 ms more per token (docs/benchmarks.md, "The model's
int8 weights, multiplied as int8").

:func:`runtime_model` derives, once per machine, a model whose products by those weights
take them as int8 and quantize their input per run (onnxruntime's dynamic quantization:
``DynamicQuantizeLinear``, ``MatMulInteger``, which onnxruntime fuses as it loads the
model): 1.85x as many texts a second here (LongMem's turns; less for short texts), with
vectors 0.994 alike (median cosine) to the float path's. It is kept beside the quick table
in the cache directory (:func:`memtap_minilm.cache.cache_dir`), named by the shipped
model's digest; processes that build it at once each write their own file and publish it
by an atomic rename.

Why by hand, not with ``onnxruntime.quantization.quantize_dynamic``: that tool quantizes
float weights, so it needs the model folded to float first (a 90 MB file), then derives the
int8 weights and scales again, per channel, in Python (~3 s holding the GIL; ~6 s in all on
a process's first use, which a fresh machine's first ``memtap demo`` waited for). The
shipped weights are already what it would derive (symmetric, per output column, largest
value 127), so the rewrite below emits the same nodes from them directly, exactly, in a
fraction of a second.

When it cannot be built (no ``onnx`` package, a read-only cache, a graph of another shape)
or cannot be read, the shipped model is run as it is, and that is logged once. One that
does not load (damaged on disk) is built again, once (:func:`open_runtime_model`). The
file is readable by every user (public weights), so an image built by one user serves
another.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from memtap.sdk import publish_atomically, remove_stale_work

from .cache import cache_dir, model_digest

log = logging.getLogger("memtap.minilm")

#: Bumped when the derived model changes for the same shipped one.
FORMAT = 2

_lock = threading.Lock()
_built: dict[Path, Path] = {}
_Opened = TypeVar("_Opened")


def derived_path(source: Path) -> Path:
    """Where the int8 model derived from ``source`` is kept."""
    return cache_dir() / f"minilm-int8-matmul-{FORMAT}-{model_digest(source)}.onnx"


def model_key(source: Path, runtime: Path) -> str:
    """A name for the model ``runtime`` (``source`` or its derivation) that changes with
    either, without hashing the derived file: the shipped model's digest, and the
    derivation's :data:`FORMAT` when it runs."""
    digest = model_digest(source)
    return digest if runtime == source else f"{digest}-int8-{FORMAT}"


def runtime_model(source: Path) -> Path:
    """The model to run for ``source``: its int8 derivation (built now when this machine
    has none, well under a second), else ``source`` itself when that cannot be built."""
    with _lock:
        known = _built.get(source)
        if known is None:
            known = _built[source] = _derive(source, rebuild=False)
        return known


def open_runtime_model(source: Path, open_model: Callable[[Path], _Opened]) -> tuple[Path, _Opened]:
    """``open_model`` of :func:`runtime_model`, and the model it opened. A derived model it
    cannot open (damaged on disk, since files are published whole) is built again, once;
    when that one does not open either, ``source`` is opened and is the runtime model of
    this process from then on (logged once)."""
    chosen = runtime_model(source)
    if chosen == source:
        return source, open_model(source)
    try:
        return chosen, open_model(chosen)
    except Exception as exc:
        log.warning("memtap-minilm: %s does not load (%s); building it again", chosen, exc)
    with _lock:
        chosen = _built[source] = _derive(source, rebuild=True)
    if chosen != source:
        try:
            return chosen, open_model(chosen)
        except Exception as exc:  # fail open: the shipped model runs, only slower
            log.warning("memtap-minilm runs its model unquantized (%s does not load: %s)", chosen, exc)
            with _lock:
                _built[source] = source
    return source, open_model(source)


def _derive(source: Path, *, rebuild: bool) -> Path:
    """The derived model's path, built when missing (or when ``rebuild``); ``source``
    when it cannot be built or read (logged)."""
    try:
        target = derived_path(source)
        if rebuild or not target.is_file():
            build(source, target)
        if not os.access(target, os.R_OK):
            raise PermissionError(f"{target} cannot be read by this user")
        return target
    except Exception as exc:  # fail open: the shipped model runs, only slower
        log.warning("memtap-minilm runs its model unquantized (%s: %s)", type(exc).__name__, exc)
        return source


def build(source: Path, target: Path) -> None:
    """Write ``target``: ``source`` with every product by a stored int8 weight made an
    integer product (:func:`int8_products`)."""
    import onnx

    model = onnx.load(str(source))
    if not int8_products(model.graph):
        raise ValueError(f"{source} has no int8 weight that a MatMul multiplies by")
    onnx.checker.check_model(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work(target.parent)
    # Public weights, no secret: readable by every user, as an image built by one user and
    # run by another needs.
    publish_atomically(target, lambda f: onnx.save(model, f), mode=0o644)
    log.info("memtap-minilm: built %s", target)


def int8_products(graph: Any) -> int:
    """Rewrite, in ``graph``, each ``MatMul(A, Mul(Cast(W), S))`` whose ``W`` is a stored
    int8 weight and ``S`` its stored scale per output column as the integer product
    onnxruntime's dynamic quantization makes: ``A`` quantized per run
    (``DynamicQuantizeLinear``, once per tensor however many products read it),
    ``MatMulInteger`` by ``W`` (zero points 0), the result cast to float and multiplied by
    ``A``'s scale times ``S``. The dequantizing ``Cast`` and ``Mul`` go. How many products
    it rewrote."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {init.name: init for init in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    readers = Counter(name for node in graph.node for name in node.input)
    quantized: dict[str, tuple[str, str, str]] = {}
    dropped: set[int] = set()  # the dequantizing nodes, by id (a node's name may be empty)
    nodes: list[Any] = []
    new_inits: list[Any] = []
    for node in graph.node:
        weight = _stored_int8_weight(node, producer, inits, readers) if node.op_type == "MatMul" else None
        if weight is None:
            nodes.append(node)
            continue
        cast, dequantize, stored, scale = weight
        dropped.update((id(cast), id(dequantize)))
        given = node.input[0]
        if given not in quantized:
            quantized[given] = (f"{given}_q8", f"{given}_q8_scale", f"{given}_q8_zero")
            nodes.append(
                helper.make_node("DynamicQuantizeLinear", [given], list(quantized[given]), name=f"{given}_q8")
            )
        values, step, zero = quantized[given]
        scales = numpy_helper.to_array(inits[scale]).reshape(-1).astype("float32")
        name = node.name or node.output[0]
        new_inits += [
            numpy_helper.from_array(scales, f"{name}_w_scale"),
            numpy_helper.from_array(scales.astype("int8") * 0, f"{name}_w_zero"),
        ]
        nodes += [
            helper.make_node(
                "MatMulInteger", [values, stored, zero, f"{name}_w_zero"], [f"{name}_i32"], name=f"{name}_i8"
            ),
            helper.make_node(
                "Cast", [f"{name}_i32"], [f"{name}_f32"], to=TensorProto.FLOAT, name=f"{name}_f32"
            ),
            helper.make_node("Mul", [step, f"{name}_w_scale"], [f"{name}_scales"], name=f"{name}_scales"),
            helper.make_node("Mul", [f"{name}_f32", f"{name}_scales"], [node.output[0]], name=name),
        ]
    if not dropped:
        return 0
    kept = [n for n in nodes if id(n) not in dropped]
    still_read = {name for node in kept for name in node.input}
    del graph.node[:]
    graph.node.extend(kept)
    unread = [init for init in graph.initializer if init.name not in still_read]
    for init in unread:
        graph.initializer.remove(init)
    graph.initializer.extend(new_inits)
    return len(dropped) // 2


def _stored_int8_weight(
    node: Any, producer: dict[str, Any], inits: dict[str, Any], readers: Counter[str]
) -> Any:
    """``(cast, dequantize, int8 weight name, scale name)`` when ``node`` (a ``MatMul``)
    multiplies by a stored int8 weight turned into floats by ``Mul(Cast(W), S)`` that
    nothing else reads, with ``S`` one scale per output column; else ``None``."""
    from onnx import TensorProto

    dequantize = producer.get(node.input[1])
    if dequantize is None or dequantize.op_type != "Mul" or readers[dequantize.output[0]] != 1:
        return None
    cast = producer.get(dequantize.input[0])
    scale = dequantize.input[1]
    if cast is None or cast.op_type != "Cast" or readers[cast.output[0]] != 1 or scale not in inits:
        return None
    stored = inits.get(cast.input[0])
    if stored is None or stored.data_type != TensorProto.INT8 or len(stored.dims) != 2:
        return None
    columns = stored.dims[1]
    scale_dims = list(inits[scale].dims)
    if scale_dims not in ([columns], [1, columns]):
        return None
    return cast, dequantize, stored.name, scale
