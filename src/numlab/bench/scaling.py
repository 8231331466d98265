"""``numlab bench scaling``: cost per element from 10^5 to 10^7 elements
(10^8 with ``--large``), so a reader sees whether cost grows linearly.

Rows (float32 copy first: the memory floor of the same machine):

* ``copy``: ``x.copy()`` of float32 values;
* ``round_to fp16 rne`` / ``round_to e4m3 rne``: :func:`numlab.rounding.round_to`
  of standard normal float32 values (x 100: some overflow e4m3);
* ``sum sequential`` / ``sum pairwise``: ``numlab.kernels.reduce`` over rows of
  1024 fp16 values (``size / 1024`` rows), fp32 accumulator.

``ns/elem`` is the best wall time of ``repeat`` calls divided by the number of
elements; ``peak x`` is tracemalloc's peak during one call divided by the
input's bytes (the output is part of it).  10^8 float32 values are 400 MB per
array: ``--large`` needs about 1.5 GB free and a minute or two.
"""

from __future__ import annotations

import numpy as np

from .. import kernels as K
from ..formats import FP8_E4M3, FP16
from ..rounding import round_to
from . import best_of
from .rounding import peak_ratio

ROW = 1024


def _cases(n: int) -> dict:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    x16 = x[: n - n % ROW].reshape(-1, ROW).astype(np.float16)
    return {
        "copy float32": (lambda: x.copy(), x.nbytes),
        "round_to fp16 rne": (lambda: round_to(x, FP16), x.nbytes),
        "round_to e4m3 rne": (lambda: round_to(x, FP8_E4M3), x.nbytes),
        "sum sequential fp16": (lambda: K.reduce(x16, "sum", order="sequential", acc="fp32"), x16.nbytes),
        "sum pairwise fp16": (lambda: K.reduce(x16, "sum", order="pairwise", acc="fp32"), x16.nbytes),
    }


def sizes(quick: bool = False, large: bool = False) -> list[int]:
    """The sizes measured: 10^5..10^7 (``quick``: 10^5..10^6; ``large`` adds 10^8)."""
    s = [10**5, 10**6] if quick else [10**5, 10**6, 10**7]
    return s + [10**8] if large else s


def main(quick: bool = False, large: bool = False) -> str:
    ns = sizes(quick, large)
    results: dict = {}
    with np.errstate(all="ignore"):
        for n in ns:
            repeat = 5 if n <= 10**6 else (3 if n <= 10**7 else 1)
            for name, (f, nbytes) in _cases(n).items():
                t = best_of(f, repeat)
                results[(name, n)] = (t / n * 1e9, peak_ratio(f, nbytes))
    names = list(_cases(ROW).keys())
    head = f"{'case':<22}" + "".join(f" {f'1e{len(str(n)) - 1} ns/el':>12} {'peak x':>6}" for n in ns)
    lines = ["time per element (best wall time / elements) and tracemalloc peak / input bytes",
             "", head]
    for name in names:
        cells = "".join(f" {results[(name, n)][0]:12.2f} {results[(name, n)][1]:6.2f}" for n in ns)
        lines.append(f"{name:<22}{cells}")
    if not large:
        lines.append("(10^8 elements: run with --large)")
    table = "\n".join(lines)
    print(table)
    return table
