"""``numlab bench kernels``: speed of the emulated kernels as ratios against numpy,
both measured in the same run.

Reductions (4096 x 4096 fp16 and bf16 rows; ``--quick``: 1024 x 1024):

* every order (sequential, pairwise, blocked(512), lanes(16), kahan) with an
  fp32 accumulator vs ``np.sum(x, axis=-1, dtype=np.float32)`` of the same
  array (target: within 3x), and its peak extra memory measured with
  :mod:`tracemalloc` as a multiple of the input's size (target: within 2x).
  The "ref" columns time the reference path
  (``numlab.kernels.reduction._reduce_reference``: the whole array widened at
  once and each order's loops over the last axis), which the fast path is
  tested bit-identical to;
* fp16 / bf16 accumulators (fp16 data into fp16, bf16 data into bf16) vs the
  naive loop of the same order: the reference loops with every addition
  rounded by an ``astype`` round trip (float32 -> fp16/bf16 -> float32)
  (target: not slower, ratio <= 1).

Matmul: a 1024^3 fp16 ``block_fma`` matmul with ``k_tile=128`` (fp32
accumulator, every entry exactly rounded) vs ``np.matmul`` of the same values in
float64 (target: within 3x).  A further line shows the floor set by the design
rule "one BLAS call per K tile": the float64 BLAS calls alone, one per K tile,
into one reused output buffer.

Matrix units: the rows of ``numlab bench mma`` (the A100 and H100
fp16 presets, fma_size 8 and 16, at the matmul's size) against the same
float64 matmul, target within 10x.

BLAS threads matter: both sides use numpy's OpenBLAS with its default thread
count.  On a small, loaded machine eight rank-128 calls with two threads can be
several times slower than with one, while the single 1024^3 reference call is
not (the "(floor)" line shows it); ``OPENBLAS_NUM_THREADS=1 numlab bench
kernels`` compares single-threaded BLAS on both sides.

With numba installed (a default dependency) the reductions and the matmul's post-BLAS
pass use numlab's compiled kernels (numlab.kernels._accel, bit-identical to the
numpy path; the machine header says whether numba is there);
``NUMLAB_ACCEL=0 numlab bench kernels`` measures the numpy path alone.

Timings are best-of-N wall times; on a shared machine they move by tens of
percent from run to run, so the header prints the load average.
"""

from __future__ import annotations

import os
import tracemalloc

import ml_dtypes
import numpy as np

from .. import kernels as K
from ..kernels.reduction import _reduce_reference
from . import Measure, Section, best_of
from .mma import TARGET as MMA_TARGET
from .mma import time_mma

REDUCE_TARGET = 2.0  # row sums <= 2x numpy's np.sum(x, -1, dtype=float32)
PEAK_TARGET = 2.0
MATMUL_TARGET = 3.0  # block-FMA 1024^3 <= 3x numpy float64 matmul
ORDERS = ("sequential", "pairwise", "blocked(512)", "lanes(16)", "kahan")


class _AstypeArith:
    """The naive accumulator: float32 operations, each result rounded by an
    ``astype`` round trip.  Runs the reference loops of an order (``_sum_reference``)."""

    native = False
    rounding = "rne"
    dtype = np.dtype(np.float32)

    def __init__(self, container):
        self.container = container

    def add(self, a, b):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.add(a, b, dtype=np.float32).astype(self.container).astype(np.float32)

    def sub(self, a, b):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.subtract(a, b, dtype=np.float32).astype(self.container).astype(np.float32)


def _peak(fn) -> int:
    """Peak bytes allocated (tracemalloc) while ``fn`` runs."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _reductions(n: int, rep: int, measures: list) -> list[str]:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, n))
    lines = [f"reductions, {n}x{n} rows (axis=-1); ratios to numpy measured in this run",
             f"{'data':5} {'order':13} {'numlab s':>9} {'numpy s':>8} {'ratio':>6} {'ref':>6}  "
             f"{'peak/in':>7} {'ref':>6}  targets: ratio <= {REDUCE_TARGET:g}, peak <= {PEAK_TARGET:g}"]
    results = []
    for name, dt in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        x = base.astype(dt)
        t_np = best_of(lambda x=x: np.sum(x, axis=-1, dtype=np.float32), rep)
        for o in ORDERS:
            t = best_of(lambda x=x, o=o: K.reduce(x, "sum", order=o, acc="fp32"), rep)
            t_ref = best_of(lambda x=x, o=o: _reduce_reference(x, "sum", order=o, acc="fp32"), max(1, rep // 2), warmup=False)
            pk = _peak(lambda x=x, o=o: K.reduce(x, "sum", order=o, acc="fp32")) / x.nbytes
            pk_ref = _peak(lambda x=x, o=o: _reduce_reference(x, "sum", order=o, acc="fp32")) / x.nbytes
            ok = "ok" if t / t_np <= REDUCE_TARGET and pk <= PEAK_TARGET else "MISSED"
            measures += [Measure(f"row sums {n}², {name} data, fp32 accumulator, {len(ORDERS)} orders, "
                                 "vs `np.sum(x, -1, dtype=float32)`", t / t_np, REDUCE_TARGET),
                         Measure("peak extra memory of those reductions / input bytes", pk, PEAK_TARGET)]
            lines.append(f"{name:5} {o:13} {t:9.4f} {t_np:8.4f} {t / t_np:6.2f} {t_ref / t_np:6.2f}  "
                         f"{pk:7.2f} {pk_ref:6.2f}  [{ok}]")
            results.append(ok)
    lines.append("")
    lines.append("16-bit accumulators vs the naive astype-per-add loop of the same order (target: ratio <= 1)")
    lines.append(f"{'acc':5} {'order':13} {'numlab s':>9} {'naive s':>8} {'ratio':>6}")
    for name, dt in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        x = base.astype(dt)
        naive = _AstypeArith(dt)
        for o in ORDERS:
            order = K.parse_order(o)
            t = best_of(lambda x=x, o=o, name=name: K.reduce(x, "sum", order=o, acc=name), max(1, rep // 2))
            t_naive = best_of(lambda x=x, order=order, naive=naive: order._sum_reference(x.astype(np.float32), naive),
                             max(1, rep // 2), warmup=False)
            ok = "ok" if t <= t_naive else "MISSED"
            measures.append(Measure("fp16/bf16 accumulators vs a naive `astype`-per-add loop", t / t_naive, 1.0))
            lines.append(f"{name:5} {o:13} {t:9.4f} {t_naive:8.4f} {t / t_naive:6.2f}  [{ok}]")
    return lines


def main(quick: bool = False) -> str:
    rng = np.random.default_rng(0)
    n = 1024 if quick else 4096
    m = 256 if quick else 1024
    rep = 3 if quick else 5
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    lines = [f"load average {' '.join(f'{v:.2f}' for v in load)} on {os.cpu_count()} cpus"]
    measures: list = []
    lines += _reductions(n, rep, measures)

    a = rng.standard_normal((m, m)).astype(np.float16)
    b = rng.standard_normal((m, m)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    stats: dict = {}
    t_mm = best_of(lambda: K.matmul(a, b, k_tile=128, acc="fp32", algo="block_fma", stats=stats), rep)
    t_np64 = best_of(lambda: a64 @ b64, rep)
    tiles = [(np.ascontiguousarray(a64[:, k:k + 128]), b64[k:k + 128]) for k in range(0, m, 128)]

    buf = np.empty((m, m))

    def ktiled_blas():
        for at, bt in tiles:
            np.matmul(at, bt, out=buf)
        return buf

    t_tiles = best_of(ktiled_blas, rep)  # the floor of "one BLAS call per K tile"
    lines.append("")
    lines.append(f"{'kernel':8} {'numlab s':>10} {'numpy s':>10} {'ratio':>7} {'target':>7}  what")
    ratio = t_mm / t_np64
    ok = "ok" if ratio <= MATMUL_TARGET else "MISSED"
    measures.append(Measure(f"block-FMA matmul {m}³ (fp16, fp32 accumulator, K tile 128) vs `np.matmul` "
                            "float64", ratio, MATMUL_TARGET))
    lines.append(f"{'matmul':8} {t_mm:10.4f} {t_np64:10.4f} {ratio:7.2f} {MATMUL_TARGET:6.1f}x  "
                 f"{m}^3 fp16 block_fma k_tile=128, fp32 acc (uncertified: {stats.get('uncertified', 0)}) "
                 f"vs np.matmul float64 [{ok}]")
    lines.append(f"{'(floor)':8} {t_tiles:10.4f} {t_np64:10.4f} {t_tiles / t_np64:7.2f} {'':>7}  "
                 f"float64 BLAS alone, one call per 128-wide K tile into one buffer (no rounding/certification)")
    # the matrix-unit model too: the rows of `bench mma`
    for row in time_mma(m, repeat=3):
        ok = "ok" if row["met"] == "yes" else "MISSED"
        measures.append(Measure(f"matrix-unit model {m}³ fp16, {row['unit']}, vs `np.matmul` float64",
                                row["ratio"], MMA_TARGET))
        lines.append(f"{'mma':8} {row['model_s']:10.4f} {row['numpy_s']:10.4f} {row['ratio']:7.2f} "
                     f"{MMA_TARGET:6.1f}x  {m}^3 fp16 on {row['unit']} (fma_size {row['fma_size']}, "
                     f"{row['engine']}) vs np.matmul float64 [{ok}]")
    out = "\n".join(lines)
    print(out)
    return Section(out, measures)


if __name__ == "__main__":  # pragma: no cover
    main()
