"""PyTorch's CPU summation orders: thin wrappers over :mod:`numlab.kernels.orders.cpu`.

The orders themselves are :class:`numlab.kernels.orders.cpu.AtenCascade`
(ATen eager ``sum``, ``cascade_sum``) and
:class:`numlab.kernels.orders.cpu.InductorLanes` (Inductor C++'s lane vectors,
butterfly and thread split), used through :func:`numlab.kernels.reduce`; the
functions here keep the older call forms (fp32 rows in, fp32 sums out).
"""

from __future__ import annotations

import numpy as np

from ..kernels.orders.cpu import (
    AtenCascade,
    InductorLanes,
    butterfly,
    ceil_log2,
    inductor_splits_reduction,
)
from ..kernels.reduction import reduce

__all__ = [
    "ceil_log2",
    "aten_sum",
    "inductor_sum",
    "inductor_splits_reduction",
    "butterfly",
]


def _f32(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.float32:
        raise TypeError(f"x must hold float32 values (the fp32 accumulator's inputs), got {a.dtype}")
    return a


def aten_sum(x, *, vec: int = 8, widen: bool = False) -> np.ndarray:
    """ATen CPU ``sum`` of the last axis of ``x`` (float32 values), in fp32:
    ``reduce(x, "sum", order=AtenCascade(vec, widen), acc="fp32")``.

    ``vec``: fp32 lanes of the kernel's ``Vectorized<float>`` (8 for AVX2);
    ``widen``: True for bf16/fp16 inputs (a load of ``2 vec`` elements is
    widened into two fp32 vectors which are added).  Returns float32 of shape
    ``x.shape[:-1]`` (the fp32 accumulator; the caller rounds it).
    """
    x = _f32(x)
    if not isinstance(vec, int) or vec < 1:
        raise ValueError(f"vec={vec!r} must be >= 1")
    return np.asarray(reduce(x, "sum", -1, order=AtenCascade(vec, bool(widen)), acc="fp32"))


def inductor_sum(x, *, lanes: int = 16, n_vec: int = 1, threads: int = 1,
                 split: bool | None = None, fp32_sum: bool = True) -> np.ndarray:
    """Inductor C++ row sum of the last axis of ``x`` (float32 values), in fp32:
    ``reduce(x, "sum", order=InductorLanes(lanes, n_vec, threads, split, fp32_sum), acc="fp32")``.

    ``split`` None: Inductor's rule (:func:`inductor_splits_reduction`, which
    depends on the number of rows); ``fp32_sum``: the CascadeSumHelper of fp32
    sums of more than 4096 elements.
    """
    x = _f32(x)
    sp = "auto" if split is None else ("true" if split else "false")
    order = InductorLanes(lanes, n_vec, threads, sp, bool(fp32_sum))
    return np.asarray(reduce(x, "sum", -1, order=order, acc="fp32"))
