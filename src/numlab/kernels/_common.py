"""Shared helpers of :mod:`numlab.kernels`: argument checking, working dtypes and
exactly rounded two-term sums.

Working dtype rule (used by every kernel): arithmetic "in format F" is done as

* native ``float32`` ops when F is fp32 (IEEE binary32, round to nearest even);
* native ``float64`` ops when F is fp64;
* ``float32`` ops followed by :func:`numlab.rounding.round_to` when
  ``2 p_F + 2 <= 24`` (fp16, bf16, tf32, fp8): for ``+ - * / sqrt`` of two
  values of F the double rounding fp32 -> F is then innocuous (Figueroa 1995;
  Roux 2014), so the result is the correctly rounded one;
* ``float64`` ops followed by ``round_to`` otherwise (a custom format with
  ``12 <= p <= 24``; ``2 p + 2 <= 53``).
"""

from __future__ import annotations

import numpy as np

from ..formats import FP32, FP64, NARROW_DTYPES, Format, get_format
from ..primitives import _odd_select, _two_sum, signed_exact_zero  # TwoSum: s + e == a + b exactly
from ..rounding import check_rounding
from ..rounding import round_to as _round_to

__all__ = ["round_to", "as_values", "work_dtype", "Arith", "to_container", "round_sum2", "check_choice",
           "welford_steps"]

def round_to(x, fmt, rounding: str = "rne", **kw):
    """:func:`numlab.rounding.round_to` with overflow/invalid warnings silenced
    (overflow to inf is the IEEE result the kernels want, and is counted later)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_to(x, fmt, rounding, **kw)


def check_choice(name: str, value, choices) -> None:
    """Raise ValueError naming the knob, its value and the valid choices."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not valid; valid choices: {list(choices)}")


def as_values(x, name: str = "x") -> np.ndarray:
    """Return ``x`` as a float32 or float64 ndarray of the same values.

    float16/bfloat16/fp8 containers are widened to float32 (exact).  Integer,
    boolean and complex inputs raise TypeError.
    """
    a = np.asarray(x)
    if a.dtype in (np.float32, np.float64):
        return a
    if a.dtype in NARROW_DTYPES:
        return a.astype(np.float32)
    if a.dtype.kind == "f":  # long double etc.
        return a.astype(np.float64)
    raise TypeError(
        f"{name} must be a floating-point array (float64/float32/float16/bfloat16/fp8 "
        f"container), got dtype {a.dtype}"
    )


def work_dtype(fmt: Format) -> np.dtype:
    """The numpy dtype in which arithmetic of ``fmt`` is carried out (module docstring)."""
    if fmt == FP32:
        return np.dtype(np.float32)
    if fmt == FP64 or fmt.p > 24:
        return np.dtype(np.float64)
    if 2 * fmt.p + 2 <= 24:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def to_container(x: np.ndarray, fmt: Format) -> np.ndarray:
    """Cast values of ``fmt`` (already rounded) to ``fmt.container`` (exact)."""
    c = fmt.container
    x = np.asarray(x)
    if x.dtype == c:
        return x
    return x.astype(c)


class Arith:
    """Correctly rounded elementwise arithmetic in a format (module docstring rule).

    Parameters
    ----------
    fmt : Format
        The format every result is rounded to.
    rounding : str
        Rounding mode of every operation (:data:`numlab.rounding.ROUNDINGS`
        but ``"stochastic"``; ``"rne"`` uses native arithmetic for fp32/fp64).
    """

    def __init__(self, fmt, rounding: str = "rne"):
        self.fmt = get_format(fmt)
        self.rounding = check_rounding(rounding, "rounding")
        if rounding == "stochastic":
            raise ValueError("rounding='stochastic' is not supported for kernel arithmetic; "
                             "valid roundings: ['rne', 'rtz', 'up', 'down', 'odd']")
        self.native = rounding == "rne" and (self.fmt == FP32 or self.fmt == FP64 or self.fmt.p >= 53)
        if rounding == "rne":
            self.dtype = work_dtype(self.fmt)
        else:
            if self.fmt == FP64 or self.fmt.p >= 53:
                raise ValueError(f"rounding={rounding!r} is not supported for fp64 arithmetic; valid: ['rne']")
            # directed modes: float64 holds the operands, sums are made exact with
            # TwoSum + round-to-odd and products of <= 26-bit values are exact.
            self.dtype = np.dtype(np.float64)

    def round(self, x):
        """Round values (any float container) to the format, in the working dtype."""
        a = as_values(np.asarray(x))
        if self.native:
            return a.astype(self.dtype, copy=False)
        if a.dtype == np.float64 and self.dtype == np.float32:
            return round_to(a, self.fmt, self.rounding).astype(np.float32)  # one rounding
        return round_to(a.astype(self.dtype, copy=False), self.fmt, self.rounding)

    def _r(self, v):
        if self.native:
            return v
        return round_to(v, self.fmt, self.rounding)

    def add(self, a, b):
        if self.rounding != "rne":
            return round_sum2(a, b, self.fmt, self.rounding)
        with np.errstate(over="ignore", invalid="ignore"):
            return self._r(np.add(a, b, dtype=self.dtype))

    def sub(self, a, b):
        if self.rounding != "rne":
            return round_sum2(a, -np.asarray(b, dtype=np.float64), self.fmt, self.rounding)
        with np.errstate(over="ignore", invalid="ignore"):
            return self._r(np.subtract(a, b, dtype=self.dtype))

    def mul(self, a, b):
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            return self._r(np.multiply(a, b, dtype=self.dtype))

    def div(self, a, b):
        if self.rounding != "rne":
            raise ValueError(f"rounding={self.rounding!r}: directed-rounding division is not modelled; "
                             "valid: ['rne']")
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            return self._r(np.divide(a, b, dtype=self.dtype))


def round_odd_pair(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Round-to-odd (to float64) of the exact value ``s + e`` where ``s = RN(s + e)``.

    With ``e != 0`` the exact value lies strictly between ``s`` and its float64
    neighbour in the direction of ``e``; round-to-odd picks whichever of the
    two has an odd last bit (Boldo & Melquiond 2008).  Rounding that result
    once more to any format with ``p <= 51`` gives the correct rounding of
    ``s + e`` in every mode.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(~np.isfinite(s) | ~np.isfinite(e), s, _odd_select(s, np.sign(e)))


def round_sum2(a, b, fmt, rounding: str = "rne") -> np.ndarray:
    """Correctly rounded ``a + b`` in ``fmt`` for float64 ``a`` and ``b`` (one rounding).

    Uses TwoSum and round-to-odd (:func:`round_odd_pair`); exact for every
    ``fmt`` with ``p <= 51`` and every rounding mode.  Returns float64.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    fmt = get_format(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        s, e = _two_sum(a, b)
    if rounding != "rne":  # float64 TwoSum gives +0 for exact zeros; "down" wants -0
        s = signed_exact_zero(s, (a, b), rounding)
    if fmt == FP64:
        return s
    return round_to(round_odd_pair(s, e), fmt, rounding)


def welford_steps(xt, ar: Arith, m: np.ndarray, m2: np.ndarray):
    """Welford's update (Welford 1962) over the leading axis of ``xt``, step k
    reading ``xt[k]``: ``d = x_k - m; m = m + d/fl(k+1); M2 = M2 + d*(x_k - m)``,
    every operation rounded by ``ar``, continuing the running mean ``m`` and
    sum of squared deviations ``m2`` (arrays of ``ar.dtype``, shape
    ``xt.shape[1:]``).  Returns the new ``(m, m2)``.

    Native fp32 arithmetic runs the same float32 operations in place in ``m``,
    ``m2`` and two scratch rows (no allocation per step); the compiled twin is
    :func:`numlab.kernels._accel.welford32`.
    """
    with np.errstate(all="ignore"):
        if ar.native and ar.dtype == np.float32:
            d = np.empty_like(m)
            t = np.empty_like(m)
            for k in range(xt.shape[0]):
                xk = xt[k]
                np.subtract(xk, m, out=d)
                np.divide(d, np.float32(k + 1), out=t)
                np.add(m, t, out=m)
                np.subtract(xk, m, out=t)
                np.multiply(d, t, out=t)
                np.add(m2, t, out=m2)
            return m, m2
        for k in range(xt.shape[0]):
            xk = xt[k]
            d = ar.sub(xk, m)
            m = ar.add(m, ar.div(d, ar.round(np.float64(k + 1))))
            m2 = ar.add(m2, ar.mul(d, ar.sub(xk, m)))
    return m, m2
