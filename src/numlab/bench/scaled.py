"""``numlab bench scaled``: quantise + dequantise a 4096x4096 float32 tensor to
MXFP8 (e4m3, e5m2), MXFP6, MXFP4, NVFP4 and DeepSeek-V3's 1x128 fp8, as a
ratio to ml_dtypes' plain cast round trip of the element type
(``x.astype(elem_dtype).astype(float32)``, no scaling) timed in the same run.

Input: N(0, 1) times a per-row log-normal spread (rows differ by orders of
magnitude, as activations do), seeded.  Every timing is the best of
``repeat`` runs after a warm-up, the scaled path and its baseline timed
alternately so both see the same machine load.

Target: MXFP8, MXFP4 and NVFP4
within 3x of the baseline.
"""

from __future__ import annotations

import time

import numpy as np

from ..kernels.scaled import SCALED_PRESETS, dequantize, quantize
from . import Measure, Section

TARGET = 3.0
TARGETED = ("mxfp8_e4m3", "mxfp4", "nvfp4")
FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp4", "nvfp4", "deepseek_1x128")


def make_data(n: int = 4096, seed: int = 0) -> np.ndarray:
    """The benchmark input: n x n float32 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, n)) * np.exp(rng.normal(0, 2, size=(n, 1)))).astype(np.float32)


def _alternate(f, g, repeat):
    """Best times of ``f`` and ``g``, each run once per round, after a warm-up."""
    f(), g()
    bf = bg = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        bf = min(bf, time.perf_counter() - t)
        t = time.perf_counter()
        g()
        bg = min(bg, time.perf_counter() - t)
    return bf, bg


def rows(n: int = 4096, repeat: int = 3, formats=FORMATS) -> list[dict]:
    """One dict per format: seconds of quantize+dequantize, of the baseline, ratio, target."""
    x = make_data(n)
    out = []
    for name in formats:
        fmt = SCALED_PRESETS[name]
        dt = fmt.elem_dtype
        t, tb = _alternate(lambda fmt=fmt: dequantize(quantize(x, fmt)),
                           lambda dt=dt: x.astype(dt).astype(np.float32), repeat)
        out.append({"format": name, "seconds": t, "baseline_seconds": tb, "ratio": t / tb,
                    "target": TARGET if name in TARGETED else None})
    return out


def main(quick: bool = False) -> str:
    """Run the benchmark (``quick``: 1024x1024, 2 repeats), print and return the table."""
    rs = rows(1024 if quick else 4096, 2 if quick else 3)
    n = 1024 if quick else 4096
    lines = [f"quantize + dequantize of {n}x{n} float32 vs ml_dtypes' cast round trip of the element type",
             f"{'format':16} {'scaled s':>9} {'cast s':>8} {'ratio':>6}  target"]
    for r in rs:
        tgt = "-" if r["target"] is None else (f"<= {r['target']:.0f}x "
                                               + ("met" if r["ratio"] <= r["target"] else "MISSED"))
        lines.append(f"{r['format']:16} {r['seconds']:9.3f} {r['baseline_seconds']:8.3f} {r['ratio']:6.2f}  {tgt}")
    measures = [Measure(f"MXFP8/MXFP4/NVFP4 quantise + dequantise {n}² vs ml_dtypes' cast round trip", r["ratio"],
                        r["target"]) for r in rs if r["target"] is not None]
    text = "\n".join(lines)
    print(text)
    return Section(text, measures)


__all__ = ["TARGET", "TARGETED", "FORMATS", "make_data", "rows", "main"]
