"""Speed of the matrix-unit model (:func:`numlab.kernels.mma.mma`) against
numpy's float64 matmul of the same values, both measured in the same run.

The target: a 1024^3 product with fp16 inputs on a unit with
``fma_size >= 8`` within 10x of ``np.matmul`` in float64.  The units timed
are the presets ``A100/fp16/fp32`` (fma_size 8) and ``H100/fp16/fp32``
(fma_size 16); ``--quick`` times 256^3.  The model is exact, not a BLAS call:
every product of every K block is aligned, truncated and summed elementwise
(numpy over (block, rows, N) chunks, or the optional numba path that
``mma(engine="auto")`` takes for large products when numba is installed), so
its cost grows as M N K with a larger constant than BLAS.  The engine column
says which path was timed; numba's compilation is done before timing.

Timings are best-of-N wall times (best of 3 runs of the model at 1024^3, of 5
of numpy); the header prints the load average of the machine.
"""

from __future__ import annotations

import os

import numpy as np

from ..kernels.mma import mma
from ..kernels.mma.presets import UNIT_PRESETS
from ..report import render_table
from . import best_of

__all__ = ["main", "time_mma", "UNITS", "TARGET"]

UNITS = ("A100/fp16/fp32", "H100/fp16/fp32")
"""Presets timed (fp16 inputs, fma_size 8 and 16)."""
TARGET = 10.0
"""The target ratio (model time / numpy float64 matmul time): the model within 10x of float64 numpy."""


def time_mma(n: int = 1024, units=UNITS, seed: int = 0, repeat: int = 1) -> list[dict]:
    """Time ``mma`` on ``n^3`` fp16 inputs for each preset in ``units`` and
    ``np.matmul`` of the same values in float64; one row per unit with both
    times (seconds) and their ratio."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    t_np = best_of(lambda: np.matmul(a64, b64), repeat=5)
    rows = []
    for name in units:
        unit = UNIT_PRESETS[name]
        try:  # the compiled path when numba is installed; compiled here, outside the timing
            mma(a[:8, :64], b[:64, :8], unit, engine="numba")
            engine = "numba"
        except ValueError:  # numba not installed (or a unit it does not cover)
            engine = "numpy"
        t = best_of(lambda u=unit, e=engine: mma(a, b, u, engine=e), repeat=repeat, warmup=False)
        rows.append({"unit": name, "fma_size": unit.fma_size, "n": n, "engine": engine, "model_s": t,
                     "numpy_s": t_np, "ratio": t / t_np, "target": f"<= {TARGET:g}x",
                     "met": "yes" if t / t_np <= TARGET else "no"})
    return rows


def main(quick: bool = False) -> str:
    """Run the measurements, print the table, return it."""
    n = 256 if quick else 1024
    rows = time_mma(n, repeat=3)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = render_table(
        rows, (("unit", "unit", "{}"), ("fma_size", "fma", "{}"), ("n", "n", "{}"), ("engine", "engine", "{}"),
               ("model_s", "mma s", "{:.3f}"), ("numpy_s", "np fp64 s", "{:.4f}"), ("ratio", "ratio", "{:.1f}x"),
               ("target", "target", "{}"), ("met", "met", "{}")),
        title=f"matrix-unit model, {n}^3 fp16 inputs, vs numpy float64 matmul (load average {load:.2f})")
    print(text)
    return text
