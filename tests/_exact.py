"""An independent, scalar, exact reference for rounding (test-only).

Written with Python integers and :class:`fractions.Fraction` only -- no numpy
arithmetic, no frexp/ldexp, nothing shared with ``numlab.rounding`` -- so that
the vectorised bit tricks in numlab are checked against the plain rule of
IEEE 754-2019 sections 4.3 and 7.4:

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
"""

from __future__ import annotations

import math
from fractions import Fraction

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
