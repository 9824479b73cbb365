"""Matrix products that stay in the calling thread.

numpy hands a float32 product to its BLAS, and a BLAS runs a product above some size on
several threads. numpy's wheels bundle OpenBLAS, whose helper threads then spin for the
next product (about 2^28 cycles) before they sleep: on this project's 2-core machine a
sketch of 8 vectors (6 µs of work) cost the other core ~1.2 ms, and over a soak of 2,000
captured exchanges the helper burned ~7 s, about 3.5 ms of CPU per exchange (issue 37).
memtap's products are small and many, and it runs beside the app's own threads, so each
call here hands BLAS pieces below the size where any BLAS starts threads; the app's own
use of numpy is left as it is (limiting BLAS's threads for the process, as threadpoolctl
does, would also limit the app's).

Measured on this project's machine (numpy 2.4, OpenBLAS 0.3.31; rows x columns x depth):
up to 491k on one thread, from 524k (2^19) on two. :data:`MAX_WORK` keeps a margin of 2x
(a recall's gram matrix of 60 hits then takes 6 pieces, ~0.02 ms more than one product).
"""

from __future__ import annotations

from typing import Any

#: The largest product (rows x columns x depth) handed to BLAS in one call.
MAX_WORK = 1 << 18


def _np() -> Any:
    import numpy

    return numpy


def rows_dot(matrix: Any, vector: Any, out: Any = None) -> Any:
    """``matrix @ vector`` (``(n, d)`` by ``(d,)``, float32) in pieces of rows, into
    ``out`` when given; the result."""
    np = _np()
    n, depth = matrix.shape
    if out is None:
        out = np.empty(n, np.result_type(matrix, vector))
    step = max(1, MAX_WORK // max(1, depth))
    for start in range(0, n, step):
        stop = min(start + step, n)
        np.matmul(matrix[start:stop], vector, out=out[start:stop])
    return out


def product(left: Any, right: Any) -> Any:
    """``left @ right`` (``(n, d)`` by ``(d, m)``) in pieces of ``left``'s rows."""
    np = _np()
    n, depth = left.shape
    columns = right.shape[1]
    out = np.empty((n, columns), np.result_type(left, right))
    step = max(1, MAX_WORK // max(1, depth * columns))
    for start in range(0, n, step):
        stop = min(start + step, n)
        np.matmul(left[start:stop], right, out=out[start:stop])
    return out
