"""Test-only oracles shared by the tests: one exact rounding and one bit comparison.

Exact rounding (:func:`round_exact`, :func:`round_to_grid`) is written with Python
integers and :class:`fractions.Fraction` only -- no numpy arithmetic, no
frexp/ldexp, nothing shared with ``numlab.rounding`` -- so that the vectorised bit
tricks in numlab are checked against the plain rule of IEEE 754-2019 sections 4.3
and 7.4:

* a finite nonzero exact value ``v`` lies in a binade ``2**e <= |v| < 2**(e+1)``;
  the grid spacing (quantum) there is ``2**(max(e, emin) - p + 1)`` (with
  subnormals) or, without subnormals, ``2**(e - p + 1)`` for ``e >= emin`` and
  ``2**emin`` below (the grid is ``{0, 2**emin}``);
* the rounding picks one of the two grid neighbours (``rne``: nearest, ties to the
  even multiple; ``rtz``: the smaller magnitude; ``up``/``down``: toward
  +inf/-inf; ``odd``: the odd multiple when inexact (Boldo & Melquiond 2008));
* a result above ``max`` overflows: ``rne`` and ``stochastic`` give inf,
  ``rtz`` and ``odd`` give ``max``, ``up`` gives +inf for positive and -max
  for negative values, ``down`` the mirror image; "inf" means NaN in a format
  without infinities and ``max`` when saturating;
* ``ftz`` flushes results below ``2**emin`` to a zero of the same sign.

Bit comparison (:func:`bits`, :func:`same_bits_mask`, :func:`same_bits`,
:func:`assert_same_bits`) compares the raw encodings: each element viewed as an
unsigned integer of its own width (uint8 for fp8/fp4 and the other one-byte
ml_dtypes formats, uint16 for fp16/bf16, uint32 for fp32, uint64 for fp64).  So
+0 differs from -0 and a NaN equals only a NaN with the same encoding (sign and
payload); ``nan_equal=True`` makes any NaN equal to any NaN, for references that
do not promise one NaN encoding.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

ROUNDINGS = ("rne", "rtz", "up", "down", "odd")


def _floor_log2(a: Fraction) -> int:
    """floor(log2(a)) for a > 0, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    # now 2**(e-1) < a < 2**(e+1)
    if _pow2(e) > a:
        e -= 1
    assert _pow2(e) <= a < _pow2(e + 1)
    return e


def _pow2(e: int) -> Fraction:
    return Fraction(2) ** e


def fmt_max(p: int, emax: int, extended_nan: bool = False) -> Fraction:
    """Largest finite value: all-ones significand at emax (minus one with
    e4m3fn-style extended NaN)."""
    top = 2**p - 1 - (1 if extended_nan else 0)
    return top * _pow2(emax - p + 1)


def neighbours(v: Fraction, fmt) -> tuple[Fraction, Fraction, Fraction]:
    """For v > 0: (lower grid point, upper grid point, fractional distance)
    on fmt's grid with unbounded exponent range above."""
    e = _floor_log2(v)
    if fmt.subnormals:
        qe = max(e, fmt.emin) - fmt.p + 1
    else:
        qe = e - fmt.p + 1 if e >= fmt.emin else fmt.emin
    q = _pow2(qe)
    t = v / q
    n = t.numerator // t.denominator
    return n * q, (n + 1) * q, t - n


def round_exact(x, fmt, rounding: str = "rne", *, saturate: bool = False, ftz: bool = False,
                up_choice: bool | None = None) -> float:
    """Round the exact value ``x`` (float, int or Fraction) to ``fmt``.

    For ``rounding="stochastic"`` pass ``up_choice`` (whether the magnitude was
    rounded up); the result is then the chosen neighbour with the overflow
    rule of round-to-nearest.  Returns a Python float (±inf/NaN, signed zero).
    """
    if isinstance(x, float):
        if math.isnan(x):
            return math.nan
        if math.isinf(x):
            if fmt.inf:
                return x
            return math.copysign(float(fmt_max(fmt.p, fmt.emax, fmt.nan == "extended")), x) \
                if saturate else math.nan
        neg = math.copysign(1.0, x) < 0
    else:
        neg = x < 0
    v = abs(Fraction(x))
    if v == 0:
        return -0.0 if neg else 0.0
    lo, hi, frac = neighbours(v, fmt)
    if frac == 0:
        r = lo
    elif rounding == "rne":
        if frac > Fraction(1, 2):
            r = hi
        elif frac < Fraction(1, 2):
            r = lo
        else:
            q = hi - lo
            r = lo if (lo / q).numerator % 2 == 0 else hi
    elif rounding == "rtz":
        r = lo
    elif rounding == "up":
        r = lo if neg else hi
    elif rounding == "down":
        r = hi if neg else lo
    elif rounding == "odd":
        q = hi - lo
        r = lo if (lo / q).numerator % 2 == 1 else hi
    elif rounding == "stochastic":
        assert up_choice is not None
        r = hi if up_choice else lo
    else:
        raise AssertionError(rounding)
    mx = fmt_max(fmt.p, fmt.emax, fmt.nan == "extended")
    if r > mx:
        to_inf = {
            "rne": True, "stochastic": True, "rtz": False, "odd": False,
            "up": not neg, "down": neg,
        }[rounding]
        if to_inf and not saturate:
            val = math.inf if fmt.inf else math.nan
        else:
            val = float(mx)
        return -val if neg else val
    if ftz and r < _pow2(fmt.emin):
        r = Fraction(0)
    val = float(r)  # exact: r is a value of a format inside fp64
    assert Fraction(val) == r
    return -val if neg else val


def stochastic_split(x, fmt) -> tuple[float, float, Fraction]:
    """(round-down magnitude result, round-up result, P(round up)) of the
    exact value x, signed like x (no overflow handling)."""
    v = abs(Fraction(x))
    if v == 0:
        return float(x), float(x), Fraction(0)
    lo, hi, frac = neighbours(v, fmt)
    s = -1 if x < 0 else 1
    return s * float(lo), s * float(hi), frac


class Grid(NamedTuple):
    """The parameters :func:`round_exact` reads from a format (an IEEE-style one by default)."""

    p: int
    emin: int
    emax: int
    subnormals: bool = True
    inf: bool = True
    nan: str = "ieee"


# the IEEE-style formats the kernel tests round to, by name: (p, emin, emax)
GRIDS = {"fp32": Grid(24, -126, 127), "fp16": Grid(11, -14, 15), "bf16": Grid(8, -126, 127),
         "fp64": Grid(53, -1022, 1023), "tf32": Grid(11, -126, 127)}


def round_to_grid(v, fmt: str, mode: str = "rne") -> float:
    """:func:`round_exact` of ``v`` to the format named ``fmt`` in :data:`GRIDS`."""
    return round_exact(v, GRIDS[fmt], mode)


# ---------------------------------------------------------------- bit comparison
def bits(a) -> np.ndarray:
    """The raw encodings of ``a``: a view as the unsigned integer of its element width."""
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _as_array(b, like: np.ndarray) -> np.ndarray:
    """``b`` as an array: an ndarray stays as it is (its dtype is compared); a
    list, tuple or Python scalar takes ``like``'s dtype (exact for values of it)."""
    return b if isinstance(b, np.ndarray) else np.asarray(b, dtype=like.dtype)


def same_bits_mask(a, b, *, nan_equal: bool = False) -> np.ndarray:
    """Elementwise: the same encoding (``nan_equal``: or both NaN).  ``a`` and
    ``b`` must have one dtype (and broadcast together)."""
    a = np.asarray(a)
    b = _as_array(b, a)
    if a.dtype != b.dtype:
        raise AssertionError(f"dtypes differ: {a.dtype} vs {b.dtype}")
    ok = bits(a) == bits(b)
    if nan_equal and a.dtype.kind in "fV":  # numpy floats; ml_dtypes formats are kind "V"
        ok = ok | (np.isnan(a) & np.isnan(b))
    return ok


def _diff_message(a: np.ndarray, b: np.ndarray, ok: np.ndarray, x, what: str) -> str:
    bad = np.flatnonzero(~ok.ravel())
    first = tuple(int(i) for i in np.unravel_index(bad[0], ok.shape))
    w = 2 * a.dtype.itemsize
    ab, bb = bits(a).ravel(), bits(b).ravel()
    shown = ", ".join(f"[{tuple(int(j) for j in np.unravel_index(i, ok.shape))}] "
                      f"{a.ravel()[i]!r} (0x{int(ab[i]):0{w}x}) vs {b.ravel()[i]!r} (0x{int(bb[i]):0{w}x})"
                      for i in bad[:5])
    xs = "" if x is None else f"; x={np.asarray(x).ravel()[bad[:5]]!r}"
    head = f"{what}: " if what else ""
    return f"{head}{bad.size} of {ok.size} elements differ ({a.dtype}), first at {first}: {shown}{xs}"


def assert_same_bits(got, want, *, nan_equal: bool = False, x=None, what: str = "") -> None:
    """Raise AssertionError unless ``got`` and ``want`` have the same dtype, the
    same shape and the same encodings (``nan_equal``: any NaN matches any NaN).
    A list or scalar ``want`` takes ``got``'s dtype.  The message gives the
    number of differing elements, the first index, both values and their
    encodings in hex (and ``x``, the inputs, at those elements)."""
    a = np.asarray(got)
    b = _as_array(want, a)
    head = f"{what}: " if what else ""
    if a.dtype != b.dtype:
        raise AssertionError(f"{head}dtypes differ: {a.dtype} vs {b.dtype}")
    if a.shape != b.shape:
        raise AssertionError(f"{head}shapes differ: {a.shape} vs {b.shape}")
    ok = same_bits_mask(a, b, nan_equal=nan_equal)
    if not ok.all():
        raise AssertionError(_diff_message(a, b, ok, x, what))


def same_bits(a, b, *, nan_equal: bool = False) -> bool:
    """True when :func:`assert_same_bits` would pass."""
    try:
        assert_same_bits(a, b, nan_equal=nan_equal)
    except AssertionError:
        return False
    return True


def bits_equal(a, b, equal_nan: bool = True) -> bool:
    """Bit for bit (signed zeros distinguished, NaN equal to NaN) after widening to float32
    (bool arrays: equal truth values); shapes must agree."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype == bool or b.dtype == bool:
        return bool(np.array_equal(a.astype(bool), b.astype(bool)))
    if a.dtype == np.float64 or b.dtype == np.float64:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return bool(np.all((a64.view(np.uint64) == b64.view(np.uint64)) | (np.isnan(a64) & np.isnan(b64))))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    return bool(np.all((a32.view(np.uint32) == b32.view(np.uint32)) | (np.isnan(a32) & np.isnan(b32))))
