"""``numlab bench kernels``: speed of the emulated kernels as ratios against numpy,
both measured in the same run.

* a 4096 x 4096 fp16 row reduction, ``blocked(512, pairwise, sequential)`` with an
  fp32 accumulator, vs ``np.sum(x, axis=1, dtype=np.float32)`` of the same array
  (target: within 5x);
* a 1024^3 fp16 ``block_fma`` matmul with ``k_tile=128`` (fp32 accumulator,
  every entry exactly rounded) vs ``np.matmul`` of the same values in float64
  (target: within 4x).  A third line shows the floor set by the design rule
  "one BLAS call per K tile": the float64 BLAS calls alone, one per K tile,
  into one reused output buffer.

BLAS threads matter: both sides use numpy's OpenBLAS with its default thread
count.  On a small, loaded machine eight rank-128 calls with two threads can be
several times slower than with one, while the single 1024^3 reference call is
not (the "(floor)" line shows it); ``OPENBLAS_NUM_THREADS=1 numlab bench
kernels`` compares single-threaded BLAS on both sides.

``--quick`` uses 1024 x 1024 and 256^3.  Timings are best-of-N wall times; on
a shared machine they move by tens of percent from run to run.
"""

from __future__ import annotations

import numpy as np

from .. import kernels as K
from . import best_of


def main(quick: bool = False) -> str:
    rng = np.random.default_rng(0)
    n = 1024 if quick else 4096
    m = 256 if quick else 1024
    rep = 3 if quick else 5
    x = rng.standard_normal((n, n)).astype(np.float16)
    order = K.Blocked(512, K.Pairwise(), K.Sequential())
    t_red = best_of(lambda: K.reduce(x, "sum", axis=1, order=order, acc="fp32"), rep)
    t_np = best_of(lambda: np.sum(x, axis=1, dtype=np.float32), rep)

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

    rows = [
        ("reduce", f"{n}x{n} fp16 rows, blocked(512,pairwise,sequential), fp32 acc",
         t_red, "np.sum(float32)", t_np, 5.0),
        ("matmul", f"{m}^3 fp16 block_fma k_tile=128, fp32 acc (uncertified: {stats.get('uncertified', 0)})",
         t_mm, "np.matmul float64", t_np64, 4.0),
    ]
    lines = [f"{'kernel':8} {'numlab s':>10} {'numpy s':>10} {'ratio':>7} {'target':>7}  what"]
    for name, what, t, _, tref, target in rows:
        ratio = t / tref
        ok = "ok" if ratio <= target else "MISSED"
        lines.append(f"{name:8} {t:10.4f} {tref:10.4f} {ratio:7.2f} {target:6.1f}x  {what} [{ok}]")
    lines.append(f"{'(floor)':8} {t_tiles:10.4f} {t_np64:10.4f} {t_tiles / t_np64:7.2f} {'':>7}  "
                 f"float64 BLAS alone, one call per 128-wide K tile into one buffer (no rounding/certification)")
    out = "\n".join(lines)
    print(out)
    return out


if __name__ == "__main__":  # pragma: no cover
    main()
