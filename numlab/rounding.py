"""Bit-exact rounding of float32/float64 values to any :class:`~numlab.formats.Format`.

``round_to(x, fmt, mode)`` returns values of ``fmt`` held in the input's dtype
(float32 or float64).  The rule it implements is IEEE 754-2019 section 4.3:
the exact value of ``x`` is rounded, with unbounded exponent range, onto the
grid of ``fmt`` (multiples of ``2**(max(e, emin) - p + 1)`` where
``2**e <= |x| < 2**(e+1)``), and a result beyond ``max`` overflows by the rule
of the mode (section 7.4: to nearest gives inf; toward zero gives ``max``;
toward +inf gives +inf for positive and -max for negative values, and the
mirror for toward -inf).

The algorithm scales ``|x|`` by a power of two so that the format's quantum
becomes 1 (exact: ``ldexp``), rounds the scaled magnitude to an integer with
the mode's rule (``rint`` is round-half-even, ``floor`` truncation, ...) and
scales back (exact).  Every step is exact in the input's own dtype, so a
float64 input is rounded once, directly, never through float32.
"""

from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

from .formats import FP32, FP64, Format, get_format

__all__ = ["MODES", "round_to", "check_mode"]

MODES = ("rne", "rtz", "up", "down", "odd", "stochastic")
"""Rounding modes: to nearest ties-to-even, toward zero, toward +inf, toward
-inf, to odd (Boldo & Melquiond 2008: truncate, then set the last bit when
inexact), and stochastic (round away from zero with probability equal to the
distance from the truncated value, in ulps)."""

# Storage dtypes whose own casts are IEEE round-to-nearest-even and are used as
# a fast path (tested bit for bit against the generic path below).
_FAST_RNE = {
    (np.dtype(np.float32), np.dtype(np.float16)),
    (np.dtype(np.float64), np.dtype(np.float16)),
    (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)),
}


def check_mode(mode) -> str:
    """Validate a rounding-mode name, raising ValueError with the choices."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode={mode!r} is not a rounding mode; valid modes: {list(MODES)}")
    return mode


def _as_float_array(x) -> tuple[np.ndarray, bool]:
    """Return (float32/float64 array, was_scalar)."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"x must be real floating point, got {type(x).__name__}")
    if isinstance(x, numbers.Real) and not isinstance(x, np.generic):
        return np.asarray(float(x), dtype=np.float64), True
    a = np.asarray(x)
    scalar = a.ndim == 0
    dt = a.dtype
    if dt == np.float32 or dt == np.float64:
        return a, scalar
    if dt == np.float16 or dt in (
        np.dtype(ml_dtypes.bfloat16),
        np.dtype(ml_dtypes.float8_e4m3fn),
        np.dtype(ml_dtypes.float8_e5m2),
    ):
        return a.astype(np.float32), scalar
    if dt.kind == "c":
        raise TypeError(f"x must be real floating point, got complex dtype {dt}")
    raise TypeError(
        f"x must be a float32 or float64 array or a Python float, got dtype {dt}; "
        "convert integers explicitly (x.astype(np.float64))"
    )


def round_to(x, fmt, mode: str = "rne", *, rng=None, saturate: bool = False, ftz: bool = False):
    """Round ``x`` to the format ``fmt`` with rounding mode ``mode``.

    Parameters
    ----------
    x : float32 or float64 array_like, or Python float
        Values to round.  float16/bfloat16/fp8 arrays are widened to float32
        first (exactly).  Integer, boolean and complex inputs raise TypeError.
    fmt : Format or str
        Target format (``"fp16"``, ``"bf16"``, ``nl.FP8_E4M3``, a custom
        :class:`Format`, ...).
    mode : {"rne", "rtz", "up", "down", "odd", "stochastic"}
        Rounding mode (see :data:`MODES`).
    rng : numpy.random.Generator, optional
        Required for ``mode="stochastic"``; the same generator state gives the
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
    check_mode(mode)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    if mode == "stochastic" and rng is None:
        raise ValueError(
            "mode='stochastic' needs rng=np.random.default_rng(seed); none was given"
        )
    a, scalar = _as_float_array(x)
    out = _round_array(a.reshape(1) if a.ndim == 0 else a, fmt, mode, rng, saturate, ftz)
    return out.reshape(())[()] if a.ndim == 0 else out


def _round_array(a: np.ndarray, fmt: Format, mode: str, rng, saturate: bool, ftz: bool):
    w = a.dtype
    # Identity: the format holds every value of the working dtype.
    if fmt is FP64 or (fmt == FP32 and w == np.float32) or fmt.p >= 53:
        out = a.copy()
        if ftz:
            _flush(out, fmt)
        return out
    if (
        mode == "rne"
        and not saturate
        and not ftz
        and fmt.dtype is not None
        and (w, fmt.dtype) in _FAST_RNE
    ):
        return a.astype(fmt.dtype).astype(w)
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_generic(a, fmt, mode, rng, saturate, ftz)


def _round_generic(a: np.ndarray, fmt: Format, mode: str, rng, saturate: bool, ftz: bool):
    """The scale-round-scale algorithm (see module docstring), vectorised."""
    w = a.dtype
    absx = np.abs(a)
    _, E = np.frexp(absx)  # absx = m * 2**E, 0.5 <= m < 1
    e = E - 1  # floor(log2|x|) for finite nonzero x
    if fmt.subnormals:
        qexp = np.maximum(e, fmt.emin)
        qexp -= fmt.p - 1
    else:
        # No gradual underflow: below 2**emin the grid is {0, 2**emin}.
        qexp = np.where(e >= fmt.emin, e - (fmt.p - 1), fmt.emin).astype(E.dtype)
    s = np.ldexp(absx, -qexp)  # exact; the quantum is now 1
    if mode == "rne":
        r = np.rint(s)
    elif mode == "rtz":
        r = np.floor(s)
    else:
        r = np.floor(s)
        if mode == "stochastic":
            u = rng.random(size=s.shape, dtype=w)
            bump = u < (s - r)  # s - r is exact (Sterbenz, or r == 0)
        else:
            inexact = s != r
            if mode == "up":
                bump = inexact & ~np.signbit(a)
            elif mode == "down":
                bump = inexact & np.signbit(a)
            else:  # odd
                bump = inexact & (np.fmod(r, 2) == 0)
        r += bump
    out = np.ldexp(r, qexp)
    np.copysign(out, a, out=out)

    finite = np.isfinite(a)
    over = (np.abs(out) > fmt.max) & finite
    if over.any():
        big = np.inf if fmt.inf else np.nan
        if saturate or mode in ("rtz", "odd"):
            repl = np.full(a.shape, fmt.max, dtype=w)
        elif mode in ("rne", "stochastic"):
            repl = np.full(a.shape, big, dtype=w)
        elif mode == "up":  # +inf for positive, -max for negative
            repl = np.where(np.signbit(a), fmt.max, big).astype(w)
        else:  # down
            repl = np.where(np.signbit(a), big, fmt.max).astype(w)
        np.copysign(repl, a, out=repl)
        np.copyto(out, repl, where=over)
    nonfinite = ~finite
    if nonfinite.any():
        vals = a.copy()
        if not fmt.inf:
            isinf = np.isinf(a)
            vals[isinf] = np.copysign(fmt.max, a[isinf]) if saturate else np.nan
        np.copyto(out, vals, where=nonfinite)
    if ftz:
        _flush(out, fmt)
    return out


def _flush(out: np.ndarray, fmt: Format) -> None:
    tiny = (np.abs(out) < fmt.smallest_normal) & (out != 0)
    if tiny.any():
        out[tiny] = np.copysign(0.0, out[tiny])
