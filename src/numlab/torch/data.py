"""Inputs that tell summation orders apart (used by tests, the faithfulness suite and notebooks)."""

from __future__ import annotations

import numpy as np

from ..formats import get_format
from ..rounding import round_to

__all__ = ["cancelling_rows", "normal"]


def normal(rng: np.random.Generator, shape, fmt, scale: float = 1.0) -> np.ndarray:
    """Standard normal values times ``scale``, rounded to ``fmt`` (float32 container)."""
    f = get_format(fmt)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    return np.asarray(round_to(x, f), dtype=np.float32)


def cancelling_rows(rng: np.random.Generator, shape, fmt, big: float | None = None) -> np.ndarray:
    """Rows whose sum cancels: ``+b, -b`` pairs of large values and small ones, shuffled.

    The exact row sum is the sum of the small values, so every fp32 rounding
    of a large partial sum shows in the result: two summation orders that
    differ give different bits on most rows.  Values are in ``fmt`` (held as
    float32); ``big`` defaults to 2**12 for fp16 and 2**20 otherwise.
    """
    f = get_format(fmt)
    shape = tuple(int(s) for s in shape)
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    if big is None:
        big = 2.0 ** 12 if f.name == "fp16" else 2.0 ** 20
    npair = n // 3
    b = rng.standard_normal((rows, npair)) * big
    s = rng.standard_normal((rows, n - 2 * npair)) * rng.uniform(0.01, 1.0, (rows, 1))
    x = np.concatenate([b, -b, s], axis=1).astype(np.float32)
    x = np.asarray(round_to(x, f), dtype=np.float32)
    x = rng.permuted(x, axis=1)
    return x.reshape(shape)
