"""Elementwise and aggregate error metrics, and the msprobe/msit columns one at a time
(the policy and the sources: :mod:`numlab.metrics`)."""

from __future__ import annotations

import math

import numpy as np

from ..formats import NARROW_DTYPES, get_format, ulp
from ..rounding import round_to

NONFINITE_MODES = ("propagate", "zero_matching")
_EPS64 = float(np.finfo(np.float64).eps)
_EXTRA_FLOATS = NARROW_DTYPES  # float16, bfloat16, fp8: derived from formats.FORMATS


# --------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------
def as_f64(a, name: str = "x") -> np.ndarray:
    """Widen ``a`` exactly to a float64 array.

    Accepts float16/32/64, bfloat16, fp8 and integer arrays (integers must be
    exactly representable, i.e. ``|a| <= 2**53``) and Python numbers/lists.
    Raises TypeError naming ``name`` for bool, complex and object input.
    """
    arr = np.asarray(a)
    dt = arr.dtype
    if dt.kind == "f" or dt in _EXTRA_FLOATS:
        return arr.astype(np.float64, copy=False)  # callers never write into it
    if dt.kind in "iu":
        out = arr.astype(np.float64)
        if out.size and np.abs(out).max() > 2.0**53:
            raise ValueError(f"{name} holds integers above 2**53 that float64 cannot hold exactly")
        return out
    raise TypeError(
        f"{name} must be a real floating-point (or integer) array, got dtype {dt}; "
        "valid: float16, bfloat16, float32, float64, fp8, integers"
    )


def _pair(ref, x) -> tuple[np.ndarray, np.ndarray]:
    r = as_f64(ref, "ref")
    y = as_f64(x, "x")
    if r.shape != y.shape:
        raise ValueError(f"ref and x must have the same shape, got ref {r.shape} and x {y.shape}")
    return r, y


def _check_nonfinite(nonfinite: str) -> None:
    if nonfinite not in NONFINITE_MODES:
        raise ValueError(f"nonfinite={nonfinite!r} is not valid; choose one of {NONFINITE_MODES}")


def nonfinite_masks(ref, x) -> dict:
    """Boolean masks of the non-finite policy (see module docstring).

    Returns a dict with ``finite`` (both finite), ``match`` (both NaN or the
    same infinity) and ``mismatch`` (every other pair with a NaN or an inf);
    the three partition the elements.
    """
    r, y = _pair(ref, x)
    return _masks(r, y)


def _masks(r: np.ndarray, y: np.ndarray) -> dict:
    fr, fy = np.isfinite(r), np.isfinite(y)
    finite = fr & fy
    nr, ny = np.isnan(r), np.isnan(y)
    match = (nr & ny) | (np.isinf(r) & (r == y))
    mismatch = ~finite & ~match
    return {"finite": finite, "match": match, "mismatch": mismatch}


def _elementwise(r: np.ndarray, y: np.ndarray, finite_err: np.ndarray) -> np.ndarray:
    """Apply the policy: finite pairs keep ``finite_err``; matches 0; mismatches inf."""
    m = _masks(r, y)
    out = np.where(m["finite"], finite_err, np.where(m["match"], 0.0, np.inf))
    return out


# --------------------------------------------------------------------------
# elementwise errors
# --------------------------------------------------------------------------
def abs_error(ref, x) -> np.ndarray:
    """``|x - ref|`` elementwise in float64 (exact up to one float64 rounding),
    with the module's NaN/inf policy."""
    r, y = _pair(ref, x)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(y - r)
    return _elementwise(r, y, d)


def rel_error(ref, x, *, tiny: float = 0.0) -> np.ndarray:
    """``|x - ref| / max(|ref|, tiny)`` elementwise.

    With the default ``tiny=0`` an exact zero reference gives 0 when ``x`` is
    also 0 and ``inf`` otherwise (the relative error is unbounded there).
    NaN/inf pairs follow the module's policy.
    """
    if not (tiny >= 0):
        raise ValueError(f"tiny must be >= 0, got {tiny!r}")
    r, y = _pair(ref, x)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = np.abs(y - r)
        den = np.maximum(np.abs(r), tiny)
        rel = np.where(d == 0, 0.0, d / den)
    return _elementwise(r, y, rel)


def ref_ulp(ref, fmt) -> np.ndarray:
    """ULP of ``fmt`` at each reference value: :func:`numlab.formats.ulp` of
    ``ref`` clamped to ``[-fmt.max, fmt.max]``, non-finite references taken
    as 0 (the ulp of 0).  ``ref`` need not be representable in ``fmt``.
    The unit of :func:`ulp_error` (and of the ULP margins in numlab.claims)."""
    fmt = get_format(fmt)
    r = as_f64(ref, "ref")
    return ulp(np.clip(np.where(np.isfinite(r), r, 0.0), -fmt.max, fmt.max), fmt)


def ulp_error(ref, x, fmt) -> np.ndarray:
    """``|x - ref| / ulp_fmt(ref)``: the error in units in the last place of
    ``fmt`` at the reference (Goldberg's ulp, :func:`numlab.formats.ulp`;
    ``ref`` need not be representable in ``fmt``).  A real number, so a
    correctly rounded result has ``ulp_error <= 0.5``.  References beyond
    ``fmt.max`` use the ulp of ``fmt.max``."""
    fmt = get_format(fmt)
    r, y = _pair(ref, x)
    q = ref_ulp(r, fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(y - r) / q
    return _elementwise(r, y, err)


def ordinal(v, fmt) -> np.ndarray:
    """Signed ordinal of values of ``fmt``: consecutive numbers of ``fmt`` get
    consecutive integers, ``+0`` and ``-0`` both map to 0, ``ordinal(-v) =
    -ordinal(v)`` and ``+inf`` is ``ordinal(max) + 1``.

    This is the sign-magnitude-to-two's-complement mapping that
    ``numpy.testing`` uses for ``nulp_diff`` (``_integer_repr``), written
    arithmetically so it also works for formats without a storage dtype:
    ``|v| = k * 2**(e - p + 1)`` with ``e = max(floor(log2|v|), emin)`` gives
    ``ordinal = (e - emin) * 2**(p - 1) + k``.  ``v`` must hold values of
    ``fmt`` (round first); NaN raises ValueError.  Returns int64.
    """
    fmt = get_format(fmt)
    a = as_f64(v, "v")
    if np.isnan(a).any():
        raise ValueError("ordinal: v contains NaN, which has no position in the order")
    mag = np.abs(a)
    fin = np.isfinite(mag)
    m = np.where(fin, mag, fmt.max)
    _, E = np.frexp(m)
    e = np.where(m == 0, fmt.emin, np.maximum(E.astype(np.int64) - 1, fmt.emin))
    k = np.ldexp(m, -(e - fmt.p + 1).astype(np.int32))
    if np.any(k != np.floor(k)):
        raise ValueError(f"ordinal: v holds values that are not numbers of {fmt.name}; round first")
    ordv = ((e - fmt.emin) << (fmt.p - 1)) + k.astype(np.int64)
    ordv = np.where(fin, ordv, ordv + 1)
    return np.where(np.signbit(a), -ordv, ordv)


def ulp_distance(a, b, fmt, *, rounding: str = "rne") -> np.ndarray:
    """Number of ``fmt`` numbers between ``a`` and ``b`` (0: same value).

    Both are first rounded to ``fmt`` with ``rounding`` (a no-op for values that
    are already numbers of ``fmt``; so for ``a`` an fp64 reference this is the
    distance from the correctly rounded result), then the distance is
    ``|ordinal(a) - ordinal(b)|`` (sign-magnitude ordering, as
    ``numpy.testing.assert_array_max_ulp`` / ``nulp_diff``; ``+0`` and ``-0``
    are 0 apart, crossing zero counts the numbers on both sides).  An infinity
    is one step beyond ``max``.  Both NaN gives 0, one NaN gives ``inf``.
    Returns float64 (integers, exact below 2**53).
    """
    fmt = get_format(fmt)
    r, y = _pair(a, b)
    ra = round_to(r, fmt, rounding)
    rb = round_to(y, fmt, rounding)
    na, nb = np.isnan(ra), np.isnan(rb)
    oa = ordinal(np.where(na, 0.0, ra), fmt)
    ob = ordinal(np.where(nb, 0.0, rb), fmt)
    d = np.abs(oa - ob).astype(np.float64)
    d = np.where(na & nb, 0.0, np.where(na | nb, np.inf, d))
    return d


def ulp_shares(dist: np.ndarray) -> dict:
    """Shares of elements at 0, 1 and >= 2 ULP (as in the autofusion test plan C1)."""
    d = np.asarray(dist)
    n = d.size
    if n == 0:
        return {"ulp0": math.nan, "ulp1": math.nan, "ulp_ge2": math.nan}
    return {
        "ulp0": float(np.count_nonzero(d == 0)) / n,
        "ulp1": float(np.count_nonzero(d == 1)) / n,
        "ulp_ge2": float(np.count_nonzero(d >= 2)) / n,
    }


def bitwise_equal(a, b) -> np.ndarray:
    """Elementwise bit equality.

    Same dtype: the raw storage bits are compared (so ``+0 != -0`` and NaN
    payloads matter).  Different dtypes: both are widened exactly to float64
    and the float64 bits compared, except that any two NaNs count as equal
    (widening may not keep payloads).
    """
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        raise ValueError(f"a and b must have the same shape, got {x.shape} and {y.shape}")
    if x.dtype == y.dtype and x.dtype.itemsize in (1, 2, 4, 8) and (
        x.dtype.kind == "f" or x.dtype in _EXTRA_FLOATS
    ):
        ut = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
        return np.ascontiguousarray(x).view(ut) == np.ascontiguousarray(y).view(ut)
    fx, fy = as_f64(x, "a"), as_f64(y, "b")
    eq = fx.view(np.uint64) == fy.view(np.uint64)
    return eq | (np.isnan(fx) & np.isnan(fy))


def bitwise_equal_share(a, b) -> float:
    """Share of elements that are :func:`bitwise_equal` (NaN for empty input)."""
    eq = bitwise_equal(a, b)
    return float(eq.mean()) if eq.size else math.nan


def percentile(err, q: float) -> float:
    """Nearest-rank percentile (``method="inverted_cdf"``), NaN for empty input.

    ``err`` must not contain NaN (the error functions never produce one)."""
    e = np.asarray(err, dtype=np.float64).ravel()
    if e.size == 0:
        return math.nan
    if np.isnan(e).any():
        raise ValueError("percentile: err contains NaN; errors follow the NaN/inf policy and are never NaN")
    return float(np.percentile(e, q, method="inverted_cdf"))


# --------------------------------------------------------------------------
# aggregate metrics
# --------------------------------------------------------------------------
def _aggregate_inputs(ref, x, nonfinite: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Return finite float64 copies following ``nonfinite``, or None for NaN."""
    _check_nonfinite(nonfinite)
    r, y = _pair(ref, x)
    fr, fy = np.isfinite(r), np.isfinite(y)
    if fr.all() and fy.all():
        return r, y
    if nonfinite == "propagate":
        return None
    same = np.array_equal(np.isnan(r), np.isnan(y)) and np.array_equal(
        np.isposinf(r), np.isposinf(y)) and np.array_equal(np.isneginf(r), np.isneginf(y))
    if not same:
        return None
    return np.where(fr, r, 0.0), np.where(fy, y, 0.0)


def _scaled_norm(v: np.ndarray) -> float:
    """Euclidean norm without overflow/underflow: ``s * ||v / s||``, ``s = max|v|``."""
    if v.size == 0:
        return 0.0
    s = float(np.max(np.abs(v)))
    if s == 0.0 or not math.isfinite(s):
        return s
    w = v / s
    return s * math.sqrt(float(np.dot(w.ravel(), w.ravel())))


def cosine_similarity(ref, x, *, nonfinite: str = "propagate") -> float:
    """``sum(ref * x) / (||ref|| * ||x||)`` over all elements, in float64.

    Both vectors are scaled by their max-abs first, so no overflow or
    underflow.  Both all-zero gives 1.0 (as msprobe); one all-zero gives NaN.
    """
    p = _aggregate_inputs(ref, x, nonfinite)
    if p is None:
        return math.nan
    r, y = (v.ravel() for v in p)
    nr, ny = _scaled_norm(r), _scaled_norm(y)
    if nr == 0 and ny == 0:
        return 1.0
    if nr == 0 or ny == 0:
        return math.nan
    sr, sy = np.max(np.abs(r)), np.max(np.abs(y))
    dot = float(np.dot(r / sr, y / sy))
    c = dot / ((nr / sr) * (ny / sy))
    return float(min(1.0, max(-1.0, c)))


def _log_softmax(v: np.ndarray, axis: int) -> np.ndarray:
    m = np.max(v, axis=axis, keepdims=True)
    z = v - m
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _expm1_minus_x(d: np.ndarray) -> np.ndarray:
    """``expm1(d) - d`` without cancellation: its Taylor series
    ``sum_{k>=2} d^k / k!`` (Horner) where ``|d| < 0.5``, where the difference
    loses all digits, with as many terms as the largest such ``|d|`` needs
    for the last one to be below ``2**-54`` of the first (20 at most); and
    ``expm1(d) - d`` elsewhere (relative loss < 1 bit there)."""
    d = np.asarray(d, dtype=np.float64)
    small = np.abs(d) < 0.5
    ds = np.where(small, d, 0.0)
    x = float(np.max(np.abs(ds))) if ds.size else 0.0
    n = 2  # highest power kept: x^(n-2) * 2 / n! < 2^-54 (a scalar loop, not over elements)
    while n < 20 and x ** (n - 1) * 2.0 / math.factorial(n + 1) >= 2.0 ** -54:
        n += 1
    acc = np.full_like(ds, 1.0 / math.factorial(n))
    for k in range(n - 1, 1, -1):  # Horner steps over whole arrays, not elements
        acc = acc * ds + 1.0 / math.factorial(k)
    out = ds * ds * acc
    if not small.all():
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.where(small, out, np.expm1(d) - d)
    return out


def _log1p_minus_x(s):
    """``log1p(s) - s`` without cancellation (series ``sum_{k>=2} (-1)^(k+1)
    s^k / k`` where ``|s| < 0.25``, 40 terms; ``log1p(s) - s`` elsewhere)."""
    s = np.asarray(s, dtype=np.float64)
    small = np.abs(s) < 0.25
    ss = np.where(small, s, 0.0)
    acc = np.full_like(ss, -1.0 / 41)
    for k in range(40, 1, -1):
        acc = acc * ss + (-1.0) ** (k + 1) / k
    with np.errstate(divide="ignore", invalid="ignore"):
        big = np.log1p(s) - s
    return np.where(small, ss * ss * acc, big)


def kl_divergence(ref, x, *, axis: int = -1, nonfinite: str = "propagate") -> float:
    """msit's KL divergence: ``sum_rows KL(softmax(ref) || softmax(x))``.

    ``p = softmax(ref)``, ``q = softmax(x)`` along ``axis``, summed over all
    other positions, clamped at 0 (msit returns ``max(result, 0)``).  0-d
    input is treated as a single-element row (KL 0).

    Computed in the stable form (the one :class:`CompareAccumulator` uses):
    with ``d = x - ref`` shifted by its ``p``-mean (softmax is shift
    invariant, so KL is unchanged),

        ``KL = log1p(E_p[expm1(d)]) - E_p[d] = b + (log1p(a + b) - (a + b))``

    with ``a = E_p[d]`` (~0) and ``b = E_p[expm1(d) - d] >= 0``, both small
    differences taken from their Taylor series where they would cancel.  This
    has no cancellation between two nearly equal log-sum-exps: for
    nearby distributions (``|d| ~ 1e-9``) it keeps the ``~Var_p(d)/2 ~ 1e-19``
    value to a few ulps, where ``sum p (log p - log q)`` returns rounding
    noise or 0.  Rows whose softmaxes are far apart (``E_p[expm1(d)] <=
    -0.5`` or an overflow) use ``sum p (log p - log q)`` with stable
    log-softmaxes, which is accurate there.
    """
    p = _aggregate_inputs(ref, x, nonfinite)
    if p is None:
        return math.nan
    r, y = p
    if r.size == 0:
        return math.nan
    if r.ndim == 0:
        r, y = r.reshape(1), y.reshape(1)
    lp = _log_softmax(r, axis)
    w = np.exp(lp)  # p = softmax(ref), rows sum to 1
    with np.errstate(over="ignore", invalid="ignore"):
        d = y - r
        # the rounding error of d (TwoDiff, exact where no overflow): d + e = y - r
        t = d - y
        e = (y - (d - t)) - (r + t)
        e = np.where(np.isfinite(e), e, 0.0)
        c = np.sum(w * d, axis=axis, keepdims=True)
        # centre: E_p[d] ~ 0 (KL is shift invariant); d - c is exact where d ~ c
        d = (d - c) + e
        a = np.sum(w * d, axis=axis)
        b = np.sum(w * _expm1_minus_x(d), axis=axis)  # E_p[expm1(d) - d] >= 0, no cancellation
        s = a + b  # E_p[expm1(d)]
        # log1p(s) - a, = b + (log1p(s) - s) where s is small and the two cancel
        stable = np.where(np.abs(s) < 0.25, b + _log1p_minus_x(s), np.log1p(s) - a)
    far = ~(np.isfinite(s) & (s > -0.5))
    if far.any():
        direct = np.sum(w * (lp - _log_softmax(y, axis)), axis=axis)
        stable = np.where(far, direct, stable)
    return max(float(np.sum(stable)), 0.0)


def euclidean(ref, x, *, nonfinite: str = "propagate") -> float:
    """``||x - ref||_2`` over all elements (float64, scaled to avoid overflow)."""
    p = _aggregate_inputs(ref, x, nonfinite)
    if p is None:
        return math.nan
    r, y = p
    return _scaled_norm((y - r).ravel())


def relative_euclidean(ref, x, *, nonfinite: str = "propagate") -> float:
    """``||x - ref||_2 / ||ref||_2``; 0 when both are zero, inf when only
    ``ref`` is zero.  (msit returns 0 whenever ``||ref|| <= eps(float32)``;
    otherwise the two agree.)"""
    p = _aggregate_inputs(ref, x, nonfinite)
    if p is None:
        return math.nan
    r, y = p
    num = _scaled_norm((y - r).ravel())
    den = _scaled_norm(r.ravel())
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def rmse(ref, x, *, nonfinite: str = "propagate") -> float:
    """Root mean squared error ``sqrt(mean((x - ref)**2))`` (NaN for empty)."""
    p = _aggregate_inputs(ref, x, nonfinite)
    if p is None:
        return math.nan
    r, y = p
    if r.size == 0:
        return math.nan
    return _scaled_norm((y - r).ravel()) / math.sqrt(r.size)


# --------------------------------------------------------------------------
# msprobe / msit columns
# --------------------------------------------------------------------------
def msprobe_relative_error(ref, x) -> np.ndarray:
    """msprobe's elementwise relative error (``get_relative_err``).

    Where ``ref == 0`` both ``ref`` and ``x`` get ``eps(float64)`` added, then
    ``|(x - ref) / ref|``.  Non-finite values follow msprobe's
    ``handle_inf_nan``: when the NaN and inf masks of both are identical the
    non-finite positions are set to 0 in both (relative error 0); otherwise
    the whole result is NaN.
    """
    p = _aggregate_inputs(ref, x, "zero_matching")
    r0, y0 = _pair(ref, x)
    if p is None:
        return np.full(r0.shape, np.nan)
    r, y = p
    return _msprobe_rel(r, y, np.abs(y - r), np.abs(r))


# The elementwise msprobe/msit formulas, on float64 arrays of equal shape
# (already widened and checked).  The one-shot functions here and the
# streaming CompareAccumulator (numlab.compare) both call these, so there is
# one implementation of each formula.
def _msprobe_rel(g: np.ndarray, m: np.ndarray, ad: np.ndarray, ag: np.ndarray) -> np.ndarray:
    """``|m - g| / |g|`` (= ``|(m - g) / g|``: IEEE division is sign-symmetric),
    with ``eps(float64)`` added to both sides where ``g == 0``; ``ad = |m - g|``,
    ``ag = |g|`` are passed in because callers have them already."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.divide(ad, ag)
    zero = np.flatnonzero(g == 0)
    if zero.size:
        gz = g.ravel()[zero] + _EPS64
        q.ravel()[zero] = np.abs(((m.ravel()[zero] + _EPS64) - gz) / gz)
    return q


def _msit_mask(g: np.ndarray) -> np.ndarray:
    """numlab's exact msit columns are computed only where ``|g| > eps64``
    (msit's own mask is ``|g| > eps32``: numlab.compare.flavors)."""
    return np.abs(g) > _EPS64


def _msit_rel(g: np.ndarray, m: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``|m / g - 1|`` where ``mask``, else 0."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.divide(m, g)
    q -= 1.0
    np.abs(q, out=q)
    q[~mask] = 0.0
    return q


def _msit_abs(ad: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``|m - g|`` (given as ``ad``) where ``mask``, else 0."""
    return np.where(mask, ad, 0.0)


def error_ratio(ref, x, rtol: float = 1e-3) -> float:
    """msprobe's error ratio: the share of elements with
    :func:`msprobe_relative_error` strictly below ``rtol`` (0.001: the
    "one-thousandth" column, 0.005: "five-thousandths").  NaN when the
    non-finite masks differ or the input is empty."""
    if not (rtol > 0):
        raise ValueError(f"rtol must be > 0, got {rtol!r}")
    rel = msprobe_relative_error(ref, x)
    if rel.size == 0 or np.isnan(rel).any():
        return math.nan
    return float(np.count_nonzero(rel < rtol)) / rel.size


MSPROBE_THRESHOLDS = {"cosine": 0.99, "max_abs_err": 1e-3, "cosine_min": 0.9, "max_abs_err_max": 1.0}
"""msprobe's ``check_accuracy`` constants (``CompareConst`` in
msprobe/core/common/const.py: ``COS_THRESHOLD``, ``MAX_ABS_ERR_THRESHOLD``,
``COS_MAX_THRESHOLD``, ``MAX_ABS_ERR_MAX_THRESHOLD``)."""


def msprobe_accuracy_reached(
    cos: float,
    max_abs_err: float,
    *,
    cosine: float = 0.99,
    max_abs_err_threshold: float = 1e-3,
    cosine_min: float = 0.9,
    max_abs_err_max: float = 1.0,
) -> bool:
    """msprobe's "Accuracy Reached or Not" thresholds (``check_accuracy``) as
    numlab applies them (numlab.compare's ``Thresholds`` calls this).

    False when ``cos < cosine and max_abs_err > max_abs_err_threshold`` or
    ``cos < cosine_min or max_abs_err > max_abs_err_max``; a NaN or infinite
    input is False (undecided data never passes); else True.  Defaults:
    :data:`MSPROBE_THRESHOLDS`.  msprobe itself says ``Yes`` for a NaN cosine
    (its ``"Nan"`` compares False with every threshold) and ``No`` only for
    ``"N/A"`` (NaN/inf at different positions); that verdict is
    :func:`numlab.compare.flavors.msprobe_check_accuracy`."""
    if not (math.isfinite(cos) and math.isfinite(max_abs_err)):
        return False
    if cos < cosine and max_abs_err > max_abs_err_threshold:
        return False
    if cos < cosine_min or max_abs_err > max_abs_err_max:
        return False
    return True


def msit_relative_error(ref, x) -> tuple[float, float]:
    """msit's (max, mean) relative error, exactly: ``|x / ref - 1|`` where
    ``|ref| > eps(float64)``, 0 elsewhere; the mean is over *all* elements.
    (msit masks with float32's eps and computes in float32:
    :func:`numlab.compare.flavors.msit_columns`.)
    Non-finite values propagate (NaN/inf results)."""
    r, y = _pair(ref, x)
    if r.size == 0:
        return math.nan, math.nan
    e = _msit_rel(r, y, _msit_mask(r))
    return float(np.max(e)), float(np.mean(e))


def msit_absolute_error(ref, x) -> tuple[float, float]:
    """msit's (max, mean) absolute error, exactly: ``|x - ref|`` where
    ``|ref| > eps(float64)``, 0 elsewhere (msit masks by the golden value
    here too, with float32's eps).  Non-finite values propagate."""
    r, y = _pair(ref, x)
    if r.size == 0:
        return math.nan, math.nan
    with np.errstate(invalid="ignore", over="ignore"):
        e = _msit_abs(np.abs(y - r), _msit_mask(r))
    return float(np.max(e)), float(np.mean(e))
