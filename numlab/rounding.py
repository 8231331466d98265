"""Bit-exact rounding of float32/float64 values to any :class:`~numlab.formats.Format`.

``round_to(x, fmt, rounding)`` returns values of ``fmt`` held in the input's dtype
(float32 or float64).  The rule it implements is IEEE 754-2019 section 4.3:
the exact value of ``x`` is rounded, with unbounded exponent range, onto the
grid of ``fmt`` (multiples of ``2**(max(e, emin) - p + 1)`` where
``2**e <= |x| < 2**(e+1)``), and a result beyond ``max`` overflows by the rule
of the mode (section 7.4: to nearest gives inf; toward zero gives ``max``;
toward +inf gives +inf for positive and -max for negative values, and the
mirror for toward -inf).

Two implementations, tested against each other, against ml_dtypes/numpy
casts (RNE) and against an exact ``fractions.Fraction`` reference
(tests/_exact.py):

* ``_round_bits`` (the fast path for every mode): on the unsigned-integer view
  of float32/float64, where ``2**emin <= |x| <= max`` the target's quantum is a
  fixed number ``k = m + 1 - p`` of input bits (``m`` = 23 or 52), so the
  magnitude is rounded by adding a mode-dependent bias to the low ``k`` bits
  and clearing them; a carry into the exponent field is the correct result.
  The few elements outside that range (below ``2**emin``, above ``max``,
  inf/NaN) go through the generic path.
* ``_round_generic``: scales ``|x|`` by a power of two so that the format's
  quantum becomes 1 (exact: ``ldexp`` in float64), rounds to an integer with
  the mode's rule (``rint`` is round-half-even, ``floor`` truncation, ...)
  and scales back (exact).

Every step is exact, so a float64 input is rounded once, directly, never
through float32 (ml_dtypes 0.6's float64 -> bfloat16/fp8 casts do go through
float32 and double-round; they are not used).  RNE from float32 to bfloat16
and from float64 to float16 uses the storage dtype's own cast where that is
faster (see ``_FAST_RNE``).
"""

from __future__ import annotations

import functools
import math
import numbers
from fractions import Fraction

import numpy as np

from .formats import BF16, FP16, FP32, NARROW_DTYPES, Format, get_format

__all__ = ["ROUNDINGS", "round_to", "check_rounding"]

ROUNDINGS = ("rne", "rtz", "up", "down", "odd", "stochastic")
"""Rounding modes (the argument is called ``rounding`` everywhere): to
nearest ties-to-even, toward zero, toward +inf, toward -inf, to odd (Boldo & Melquiond 2008: truncate, then set the last bit when
inexact), and stochastic (round away from zero with probability equal to the
distance from the truncated value, in ulps)."""

# Storage-dtype casts that are IEEE round-to-nearest-even *and* faster than
# the bit path here (numpy 2.4 / ml_dtypes 0.6, 2-core machine, 10^7 values):
# float32 -> bfloat16 (ml_dtypes, ~12 ms vs ~15 ms) and float64 -> float16
# (numpy, direct, ~57 ms vs ~82 ms).  float32 -> float16 through numpy is
# slower than the bit path when subnormals are present; ml_dtypes' float64 ->
# bfloat16/fp8 casts round through float32 (double rounding), so they are never
# used.  Both fast paths are tested bit for bit against the bit path and the
# exact reference.
_FAST_RNE = {
    (np.dtype(np.float64), FP16.dtype),
    (np.dtype(np.float32), BF16.dtype),
}


def check_rounding(rounding, name: str = "rounding") -> str:
    """Validate a rounding-mode name, raising ValueError naming the argument
    ``name``, its value and the choices."""
    if not isinstance(rounding, str) or rounding not in ROUNDINGS:
        raise ValueError(
            f"{name}={rounding!r} is not a rounding mode; valid modes: {list(ROUNDINGS)}"
        )
    return rounding


def _to_float_odd(x) -> float:
    """A Python int/Fraction as float64 rounded *to odd* (a float as is), so
    that the later rounding to any format with p <= 51 is still correct
    (Boldo & Melquiond 2008); ``float(x)`` alone would round twice."""
    if isinstance(x, float):
        return x
    try:
        f = float(x)
    except OverflowError:  # beyond fp64: +-DBL_MAX is its round-to-odd value
        return float(np.finfo(np.float64).max) * (1.0 if x > 0 else -1.0)
    exact, fr = Fraction(x), Fraction(f)
    if fr == exact or (int(np.float64(f).view(np.uint64)) & 1):
        return f
    return float(np.nextafter(f, math.inf if exact > fr else -math.inf))


def _as_float_array(x) -> np.ndarray:
    """``x`` as a float32/float64 array: narrow floats widened exactly, Python
    numbers as float64 rounded to odd (:func:`_to_float_odd`)."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"x must be real floating point, got {type(x).__name__}")
    if isinstance(x, numbers.Real) and not isinstance(x, np.generic):
        return np.asarray(_to_float_odd(x), dtype=np.float64)
    a = np.asarray(x)
    dt = a.dtype
    if dt == np.float32 or dt == np.float64:
        return a
    if dt in NARROW_DTYPES:  # float16, bfloat16, fp8: exact in float32
        return a.astype(np.float32)
    if dt.kind == "c":
        raise TypeError(f"x must be real floating point, got complex dtype {dt}")
    raise TypeError(
        f"x must be a float32 or float64 array or a Python float, got dtype {dt}; "
        "convert integers explicitly (x.astype(np.float64))"
    )


def round_to(
    x,
    fmt,
    rounding: str = "rne",
    *,
    rng=None,
    saturate: bool = False,
    ftz: bool = False,
):
    """Round ``x`` to the format ``fmt`` with rounding mode ``rounding``.

    Parameters
    ----------
    x : float32 or float64 array_like, or Python float
        Values to round.  float16/bfloat16/fp8 arrays are widened to float32
        first (exactly).  Integer, boolean and complex inputs raise TypeError.
    fmt : Format or str
        Target format (``"fp16"``, ``"bf16"``, ``nl.FP8_E4M3``, a custom
        :class:`Format`, ...).
    rounding : {"rne", "rtz", "up", "down", "odd", "stochastic"}
        Rounding mode (see :data:`ROUNDINGS`).
    rng : numpy.random.Generator, optional
        Required for ``rounding="stochastic"``; the same generator state gives the
        same bits.
    saturate : bool
        Overflow (and ±inf input to a format without inf) gives ±max instead
        of ±inf (or NaN).
    ftz : bool
        Flush results below ``smallest_normal`` to a zero of the same sign.

    Returns
    -------
    ndarray or numpy scalar
        Same dtype as the (widened) input, holding only values of ``fmt``
        (plus ±inf/NaN).  NaN stays NaN, ±inf stays ±inf where the format has
        infinities (else NaN, or ±max when saturating), -0.0 keeps its sign.

    Notes
    -----
    Overflow follows IEEE 754-2019 section 7.4 per mode; ``odd`` overflows
    like truncation (to ±max), ``stochastic`` like round-to-nearest when it
    rounds up past ``max``.  A format without infinities (fp8 e4m3fn)
    overflows to NaN, as ml_dtypes does.
    """
    fmt = get_format(fmt)
    check_rounding(rounding, "rounding")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    if rounding == "stochastic" and rng is None:
        raise ValueError(
            "rounding='stochastic' needs rng=np.random.default_rng(seed); none was given"
        )
    a = _as_float_array(x)
    out = _round_array(a.reshape(1) if a.ndim == 0 else a, fmt, rounding, rng, saturate, ftz)
    return out.reshape(())[()] if a.ndim == 0 else out


def _round_array(a: np.ndarray, fmt: Format, rounding: str, rng, saturate: bool, ftz: bool):
    w = a.dtype
    # Identity: the format holds every value of the working dtype.
    if fmt.p >= 53 or (fmt is FP32 and w == np.float32):
        out = a.copy()
        if ftz:
            _flush(out, fmt)
        return out
    if a.size == 0:
        return a.copy()
    if (
        rounding == "rne"
        and not saturate
        and not ftz
        and fmt.dtype is not None
        and (w, fmt.dtype) in _FAST_RNE
    ):
        with np.errstate(over="ignore"):  # overflow to inf is the defined result
            return a.astype(fmt.dtype).astype(w)
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_bits(a, fmt, rounding, rng, saturate, ftz)


# working dtype -> (unsigned view, signed view, stored significand bits)
_BITS = {
    np.dtype(np.float32): (np.uint32, np.int32, 23),
    np.dtype(np.float64): (np.uint64, np.int64, 52),
}


_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def _random_bits(rng: np.random.Generator, n: int, U) -> np.ndarray:
    """``n`` uniformly random unsigned integers of type ``U`` (fresh array).

    The raw 64-bit outputs of the bit generator are used directly when it
    produces 64 random bits per call (PCG64 -- numpy's default --, PCG64DXSM,
    Philox, SFC64; ~2x faster than ``integers``); other bit generators (e.g.
    MT19937, whose raw outputs have 32 bits) go through ``rng.integers``.
    """
    if isinstance(rng.bit_generator, _RAW64):
        if U is np.uint64:
            return rng.bit_generator.random_raw(n)
        return rng.bit_generator.random_raw((n + 1) // 2).view(np.uint32)[:n]
    return rng.integers(0, 1 << (8 * np.dtype(U).itemsize), size=n, dtype=U)


@functools.lru_cache(maxsize=256)
def _bit_consts(fmt: Format, w: np.dtype):
    """Per (format, working dtype) constants of :func:`_round_bits`."""
    U, I, mbits = _BITS[w]
    nbits = 8 * w.itemsize
    k = mbits + 1 - fmt.p  # low bits to round away
    low = U((1 << k) - 1)
    keep = U(((1 << nbits) - 1) ^ int(low))
    hi = int(np.array(fmt.max, dtype=w).view(U))
    sn_bits = int(np.array(fmt.smallest_normal, dtype=w).view(U))
    needs_lo = w == np.float64 or fmt.emin > -126 or not fmt.subnormals
    lo = sn_bits if needs_lo else 0
    return U, I, nbits, k, low, keep, hi, lo, sn_bits


def _round_bits(a: np.ndarray, fmt: Format, rounding: str, rng, saturate: bool, ftz: bool):
    """Integer bit-manipulation rounding (vectorised; the fast path of every mode).

    Where ``2**emin <= |x| <= max`` the target's quantum is ``2**(m+1-p)``
    times the input's (``m`` = 23 or 52 stored significand bits), a constant,
    so the magnitude bits are rounded by adding a mode-dependent bias to the
    ``k = m + 1 - p`` low bits and clearing them; a carry out of the
    significand increments the exponent field, which is the correct result
    (the next binade starts at significand 1.0).  The sign bit is never
    touched because a finite magnitude plus the bias stays below the sign bit.

    Elements outside that range (nonzero values below ``2**emin`` whose
    quantum is not a fixed number of input bits, values above ``max`` that
    overflow by a mode rule, inf and NaN) are gathered and rounded by
    :func:`_round_generic`.  ±0 is exact in every mode.
    """
    w = a.dtype
    U, I, nbits, k, low, keep, hi, lo, sn_bits = _bit_consts(fmt, w)
    flat = np.ascontiguousarray(a).reshape(-1)
    b = flat.view(U)

    # --- elements the bit path does not handle ------------------------------
    idx = None
    if lo == 0:
        amax, amin = flat.max(), flat.min()  # NaN propagates and fails the test
        if not (amax <= fmt.max and amin >= -fmt.max):
            mag = np.bitwise_and(b, U((1 << (nbits - 1)) - 1))
            idx = np.flatnonzero(mag > U(hi))
    else:
        t = np.left_shift(b, U(1))  # 2|x| in bits, sign dropped
        t -= U(2 * lo)  # wraps below 2**emin
        span = U(2 * (hi - lo))
        if t.max() > span:
            m = t > span
            m &= t != U((1 << nbits) - 2 * lo)  # +-0 is exact in every rounding
            idx = np.flatnonzero(m)
        del t

    # --- the bit path ---------------------------------------------------------
    if k == 0:
        out = b.copy()
    elif rounding == "rtz":
        out = np.bitwise_and(b, keep)
    elif rounding == "rne":
        out = np.right_shift(b, U(k))
        out &= U(1)  # lowest kept bit: ties go to even
        out += U((1 << (k - 1)) - 1)
        out += b
        out &= keep
    elif rounding in ("up", "down"):
        out = np.empty_like(b)
        np.right_shift(b.view(I), I(nbits - 1), out=out.view(I))  # all ones if negative
        if rounding == "up":
            np.invert(out, out=out)  # round the magnitude up for positive x
        out &= low
        out += b
        out &= keep
    elif rounding == "odd":
        out = np.bitwise_and(b, low)
        out += low  # bit k is set iff some low bit was set (inexact)
        out &= U(1 << k)
        out |= b
        out &= keep
    else:  # stochastic: a carry out of the low bits happens with P = low bits / 2**k
        out = _random_bits(rng, flat.size, U)
        out &= low
        out += b
        out &= keep

    if idx is not None and idx.size:
        _fix_specials(out, b, flat, idx, fmt, rounding, rng, saturate, ftz)
    if ftz:
        t = np.left_shift(out, U(1))
        tiny = t < U(2 * sn_bits)
        np.bitwise_and(out, U(1 << (nbits - 1)), out=out, where=tiny)
    return out.view(w).reshape(a.shape)


def _fix_specials(out, b, flat, idx, fmt: Format, rounding, rng, saturate, ftz) -> None:
    """Results of the elements ``idx`` outside ``[2**emin, max]``, in place.

    Finite values above ``max`` are normal numbers, so the bit path's result
    for them is the correct rounding with an unbounded exponent (a carry may
    reach the inf exponent field, which also compares above ``max``); where
    that exceeds ``max`` the mode's overflow rule replaces it (IEEE 754-2019
    section 7.4, as in :func:`_round_generic`).  inf/NaN inputs pass through
    (inf becomes NaN, or ±max when saturating, in formats without inf).
    Nonzero values below ``2**emin`` go through :func:`_round_generic`.
    """
    U, _, nbits, _, _, _, hi, lo, _ = _bit_consts(fmt, flat.dtype)
    sign = U(1 << (nbits - 1))
    absmask = U((1 << (nbits - 1)) - 1)
    infbits = int(np.array(np.inf, dtype=flat.dtype).view(U))
    nanbits = int(np.array(np.nan, dtype=flat.dtype).view(U))
    bi = b[idx]
    mag = bi & absmask
    tiny = mag < U(lo)
    nonfinite = mag >= U(infbits)
    big = ~(tiny | nonfinite)
    r = out[idx]
    neg = (bi & sign) != 0
    over = big & ((r & absmask) > U(hi))
    if over.any():
        if saturate or rounding in ("rtz", "odd"):
            to_inf = np.zeros_like(over)
        elif rounding in ("rne", "stochastic"):
            to_inf = np.ones_like(over)
        else:  # up: +inf for positive, -max for negative; down: the mirror
            to_inf = neg if rounding == "down" else ~neg
        top = U(infbits if fmt.inf else nanbits)
        np.copyto(r, np.where(to_inf, top, U(hi)) | (bi & sign), where=over)
    if nonfinite.any():
        res = bi.copy()
        if not fmt.inf:
            isinf = nonfinite & (mag == U(infbits))
            res[isinf] = (U(hi) | (bi[isinf] & sign)) if saturate else U(nanbits)
        np.copyto(r, res, where=nonfinite)
    out[idx] = r
    if tiny.any():
        t = idx[tiny]
        out[t] = _round_generic(flat[t], fmt, rounding, rng, saturate, ftz).view(U)


def _round_generic(a: np.ndarray, fmt: Format, rounding: str, rng, saturate: bool, ftz: bool):
    """The scale-round-scale algorithm (see module docstring), vectorised.

    float32 input is widened to float64 (exact) so that the scaling can never
    underflow; the result is narrowed back exactly (every value of ``fmt`` is
    a float32 value).  This path is the readable statement of the rule; the
    fast path :func:`_round_bits` is tested against it and against the exact
    reference.
    """
    w = a.dtype
    x = a.astype(np.float64)
    absx = np.abs(x)
    _, E = np.frexp(absx)  # absx = m * 2**E, 0.5 <= m < 1
    e = E.astype(np.int64) - 1  # floor(log2|x|) for finite nonzero x
    if fmt.subnormals:
        qexp = np.maximum(e, fmt.emin) - (fmt.p - 1)
    else:
        # No gradual underflow: below 2**emin the grid is {0, 2**emin}.
        qexp = np.where(e >= fmt.emin, e - (fmt.p - 1), fmt.emin)
    qexp = qexp.astype(np.int32)
    s = np.ldexp(absx, -qexp)  # exact unless it underflows (then s < 2**-1022)
    if rounding == "rne":
        r = np.rint(s)
    else:
        r = np.floor(s)
        if rounding == "stochastic":
            u = rng.random(size=s.shape)
            bump = u < (s - r)  # s - r is exact (Sterbenz, or r == 0)
        elif rounding != "rtz":
            inexact = np.ldexp(r, qexp) != absx  # robust even if s underflowed
            if rounding == "up":
                bump = inexact & ~np.signbit(x)
            elif rounding == "down":
                bump = inexact & np.signbit(x)
            else:  # odd
                bump = inexact & ((r.astype(np.int64) & 1) == 0)
        if rounding != "rtz":
            r += bump
    out = np.ldexp(r, qexp)
    np.copysign(out, x, out=out)

    finite = np.isfinite(x)
    over = (np.abs(out) > fmt.max) & finite
    if over.any():
        big = np.inf if fmt.inf else np.nan
        neg = np.signbit(x)
        if saturate or rounding in ("rtz", "odd"):
            mag = np.full(x.shape, fmt.max)
        elif rounding in ("rne", "stochastic"):
            mag = np.full(x.shape, big)
        elif rounding == "up":  # +inf for positive, -max for negative
            mag = np.where(neg, fmt.max, big)
        else:  # down: -inf for negative, +max for positive
            mag = np.where(neg, big, fmt.max)
        np.copysign(mag, x, out=mag)
        np.copyto(out, mag, where=over)
    nonfinite = ~finite
    if nonfinite.any():
        vals = x.copy()
        if not fmt.inf:
            isinf = np.isinf(x)
            vals[isinf] = np.copysign(fmt.max, x[isinf]) if saturate else np.nan
        np.copyto(out, vals, where=nonfinite)
    if ftz:
        _flush(out, fmt)
    return out.astype(w)


def _flush(out: np.ndarray, fmt: Format) -> None:
    tiny = (np.abs(out) < fmt.smallest_normal) & (out != 0)
    if tiny.any():
        out[tiny] = np.copysign(0.0, out[tiny])
