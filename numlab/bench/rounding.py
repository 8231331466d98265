"""``numlab bench rounding``: round_to on 10^7 float32 values, every rounding mode, for
FP16, BF16 and FP8_E4M3, next to the casts it must match.

The data are N(0, 1) * 100 with 1% of the values log-uniform in
[2**-149, 2**-14] (fp32 and fp16 subnormals, below e4m3's smallest normal)
and 1% uniform in +-[6e4, 7e4] (around fp16's overflow threshold; all of them
overflow e4m3).  Every timing is the best of ``repeat`` runs after a warm-up,
measured in the same process as the baselines:

* ``copy``: ``x.copy()`` (memory bandwidth floor);
* ``np.float16 rt``: ``x.astype(np.float16).astype(np.float32)``;
* ``cast rt``: the format's own storage-dtype round trip
  (``astype(ml_dtypes.bfloat16 / float8_e4m3fn)``; numpy's float16 for fp16),
  timed alternately with each mode (so both see the same machine load); the
  ratio column divides the mode's best time by the cast's best time of the
  same pairing, and the ``cast rt ms`` column shows that time.

Targets: RNE within 1.5x of the cast round trip, other
deterministic modes within 3x, stochastic within 6x.
"""

from __future__ import annotations

import time

import numpy as np

from ..formats import BF16, FP8_E4M3, FP16
from ..rounding import ROUNDINGS, round_to
from . import best_of

TARGET = {"rne": 1.5, "rtz": 3.0, "up": 3.0, "down": 3.0, "odd": 3.0, "stochastic": 6.0}


def make_data(n: int, seed: int = 0) -> np.ndarray:
    """The benchmark input (float32), see the module docstring."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 100
    k = n // 100
    i = rng.permutation(n)
    sign = rng.choice([-1.0, 1.0], size=2 * k)
    x[i[:k]] = sign[:k] * 2.0 ** rng.uniform(-149, -14, k)
    x[i[k:2 * k]] = sign[k:] * rng.uniform(6e4, 7e4, k)
    return x.astype(np.float32)


def _paired_best(f, g, repeat: int) -> tuple[float, float]:
    """Best times of ``f`` and ``g`` run alternately ``repeat`` times each."""
    f()
    g()
    bf = bg = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        t1 = time.perf_counter()
        g()
        t2 = time.perf_counter()
        bf, bg = min(bf, t1 - t0), min(bg, t2 - t1)
    return bf, bg


def main(quick: bool = False) -> str:
    n = 10**6 if quick else 10**7
    repeat = 2 if quick else 7
    x = make_data(n)
    rng = np.random.default_rng(1)
    with np.errstate(all="ignore"):
        base = {
            "copy": best_of(lambda: x.copy(), repeat),
            "np.float16 rt": best_of(lambda: x.astype(np.float16).astype(np.float32), repeat),
        }
    casts = {f: f.container for f in (FP16, BF16, FP8_E4M3)}  # the storage dtype round trip
    lines = [
        f"round_to on {n:.0e} float32 values (N(0,1)*100, 1% subnormal, 1% near fp16 overflow);"
        f" best of {repeat}",
        f"baselines: copy {base['copy'] * 1e3:.1f} ms, numpy float16 round trip "
        f"{base['np.float16 rt'] * 1e3:.1f} ms",
        "",
        f"{'format':<9} {'rounding':<11} {'ms':>8} {'cast rt ms':>11} {'ratio':>7} {'target':>7}  ok",
    ]
    with np.errstate(all="ignore"):
        for fmt, dt in casts.items():
            for rounding in ROUNDINGS:
                kw = {"rng": rng} if rounding == "stochastic" else {}
                # interleaved with the cast so that both see the same machine load
                t, tc = _paired_best(
                    lambda fmt=fmt, rounding=rounding, kw=kw: round_to(x, fmt, rounding, **kw),
                    lambda dt=dt: x.astype(dt).astype(np.float32),
                    repeat,
                )
                ratio = t / tc
                ok = "yes" if ratio <= TARGET[rounding] else "NO"
                lines.append(
                    f"{fmt.name:<9} {rounding:<11} {t * 1e3:8.1f} {tc * 1e3:11.1f} {ratio:7.2f}"
                    f" {TARGET[rounding]:6.1f}x  {ok}"
                )
    table = "\n".join(lines)
    print(table)
    return table
