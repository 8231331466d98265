"""Error metrics between a reference and a computed tensor.

Every function takes ``(ref, x)``: ``ref`` the reference (usually the fp64
reference run, or the "golden"/"bench" dump of msit/msprobe) and ``x`` the
tensor under test.  Inputs may be float16/32/64, bfloat16 or fp8 arrays
(ml_dtypes) or nested lists; they are widened **exactly** to float64 before
any arithmetic, and the shapes must be equal (no broadcasting).

NaN and infinity policy (the same everywhere, never a silent drop)
-------------------------------------------------------------------
An element pair is

* **finite** when both values are finite: its errors are the usual ones;
* a **non-finite match** when both are NaN, or both are the same infinity:
  its absolute, relative and ULP errors are 0 (the values agree), and it is
  counted in ``nonfinite_match``;
* a **non-finite mismatch** otherwise (NaN against a number, an infinity
  against a finite value, +inf against -inf): its absolute, relative and ULP
  errors are ``inf``, and it is counted in ``nonfinite_mismatch``.

So the elementwise statistics (max, mean, percentiles, ULP shares) always run
over *all* elements, and one mismatched NaN makes ``max`` and ``mean`` inf.
Aggregate metrics (cosine similarity, KL divergence, Euclidean distances,
RMSE) take ``nonfinite=``:

* ``"propagate"`` (default): any NaN/inf in either tensor gives NaN;
* ``"zero_matching"``: msprobe's rule (``handle_inf_nan`` in msprobe's
  ``npy_compare.py``): when the NaN masks and the inf masks of both tensors
  are identical, those positions are set to 0 in both and the metric is
  computed; when they differ the metric is NaN.

Percentiles are nearest-rank (``numpy.percentile(method="inverted_cdf")``):
``P_q`` is the smallest error ``e`` such that at least ``q`` percent of the
elements have error ``<= e``.  It is always one of the observed errors, so
it is exact, needs no interpolation and is well defined with infinities.

Sources of the tool-specific formulas
-------------------------------------
* msit (``ait``/``msit`` ``compare``, ``cmp_algorithm.py``): cosine
  similarity; max/mean relative error ``|x/ref - 1|`` where
  ``|ref| > eps``, else 0; max/mean absolute error with the same mask (here
  ``eps = eps(float64)``, evaluated exactly; msit itself computes in float32
  and masks with float32's eps 1.19e-7: :mod:`numlab.compare.flavors`); KL divergence ``KL(softmax(ref) || softmax(x))`` along the last axis
  summed over rows and clamped at 0 (``F.kl_div(F.log_softmax(my),
  F.softmax(golden), reduction="sum")``); relative Euclidean distance
  ``sqrt(sum((x - ref)**2) / sum(ref**2))``, 0 when ``||ref|| <= eps``.
* msprobe (``msprobe/core/compare/npy_compare.py``): relative error
  ``|(x - ref) / ref|`` after adding ``eps`` to both where ``ref == 0``
  (here ``eps(float64)`` in float64; 8.3.3 adds it in the input dtype, where
  fp16 rounds it away, 26.2.0 adds float32's eps in float32:
  :mod:`numlab.compare.flavors`); the one-thousandth / five-thousandths ratios are the shares of
  elements with relative error strictly below 0.001 / 0.005; "accuracy
  reached" is ``No`` when ``cos < 0.99 and max_abs_err > 0.001`` or when
  ``cos < 0.9 or max_abs_err > 1``, else ``Yes``
  (``CompareConst.COS_THRESHOLD = 0.99``, ``MAX_ABS_ERR_THRESHOLD = 0.001``,
  ``COS_MAX_THRESHOLD = 0.9``, ``MAX_ABS_ERR_MAX_THRESHOLD = 1``).
* All msit/msprobe columns at once, streamed: :class:`CompareAccumulator`
  (fed chunks, O(chunk) memory; numlab.compare streams memory-mapped dumps
  through it) and its one-shot form :func:`compare_columns`.  Its
  elementwise formulas are the private kernels the one-shot functions above
  call (``_msit_rel``, ``_msit_abs``, ``_msprobe_rel``), so each formula
  exists once; msprobe's accuracy rule is :func:`msprobe_accuracy_reached`
  with the thresholds as parameters.
* PyTorch Inductor's acceptance rule: :func:`inductor_check`, a transcription
  of ``torch._dynamo.utils.same`` and ``rmse`` in torch 2.13.0
  (``torch/_dynamo/utils.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .formats import NARROW_DTYPES, Format, get_format, ulp
from .rounding import round_to

__all__ = [
    "NONFINITE_MODES",
    "as_f64",
    "nonfinite_masks",
    "abs_error",
    "rel_error",
    "ref_ulp",
    "ulp_error",
    "ordinal",
    "ulp_distance",
    "ulp_shares",
    "bitwise_equal",
    "bitwise_equal_share",
    "percentile",
    "cosine_similarity",
    "kl_divergence",
    "relative_euclidean",
    "euclidean",
    "rmse",
    "msprobe_relative_error",
    "error_ratio",
    "msprobe_accuracy_reached",
    "msit_relative_error",
    "msit_absolute_error",
    "MSPROBE_THRESHOLDS",
    "CompareAccumulator",
    "compare_columns",
    "InductorResult",
    "inductor_multiplier",
    "inductor_check",
    "error_stats",
]

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


# --------------------------------------------------------------------------
# all msit/msprobe columns in one streaming pass
# --------------------------------------------------------------------------
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot product by numpy's own (single-threaded, deterministic) loop, not
    a multithreaded BLAS whose summation order depends on the thread count."""
    return float(np.einsum("i,i->", a, b))


def _safe(c: float) -> bool:
    """Whether sums of squares of values up to ``c`` in magnitude can be
    formed unscaled in float64 (no overflow, no underflow)."""
    return 1e-100 < c < 1e100


class CompareAccumulator:
    """The msit/msprobe/ULP columns of two tensors, fed in chunks.

    Feed equal-length 1-d chunks of the flattened golden (``g``) and mine
    (``m``) arrays with :meth:`update` (any numeric dtype; widened exactly to
    float64), then :meth:`finish` returns the columns.  This is what
    :func:`numlab.compare.compare_arrays` streams memory-mapped dumps
    through (O(chunk) memory); :func:`compare_columns` is the one-shot form.

    * Elementwise columns use this module's formulas (``_msit_rel``,
      ``_msit_abs``, ``_msprobe_rel``, the ulp of :func:`ref_ulp`): max and
      counts do not depend on the chunking; a mean is a sum of per-chunk
      sums (so it can differ in the last bits between chunkings).  With one
      chunk every elementwise column equals the one-shot function
      (:func:`msit_relative_error`, :func:`msit_absolute_error`,
      :func:`msprobe_relative_error`, :func:`error_ratio`, :func:`ulp_error`)
      bit for bit (tested).
    * Aggregates (cosine, Euclidean distances, KL over the flattened tensor)
      are accumulated in float64 with running scales (LAPACK ``dnrm2``
      style, no overflow or underflow) and an online log-sum-exp; they agree
      with :func:`cosine_similarity`, :func:`euclidean`,
      :func:`relative_euclidean` and :func:`kl_divergence` (of the flattened
      tensors, ``nonfinite="zero_matching"``) to rounding.
    * NaN/inf follow msprobe's ``handle_inf_nan``: pairs with the same class
      at the same position are set to 0 on both sides (counted); any other
      non-finite pair is a mismatch and makes every error column NaN.

    Parameters
    ----------
    fmt : Format or str
        Format of the ULP columns (``|m - g| / ulp_fmt(g)``).
    """

    def __init__(self, fmt: Format | str = "fp32"):
        self.fmt = get_format(fmt)
        self.n = 0
        self.bits_equal = 0
        self.g_nan = self.g_inf = self.m_nan = self.m_inf = 0
        self.mismatch = 0
        self.matched_nonfinite = 0
        self.g_max = self.m_max = -np.inf
        self.g_min = self.m_min = np.inf
        self.g_sum = self.m_sum = 0.0
        self.dot = 0.0  # sum of (g/scale_g)(m/scale_m)
        self.scale = {"g": 0.0, "m": 0.0, "d": 0.0}
        self.ssq = {"g": 0.0, "m": 0.0, "d": 0.0}
        self.maxabs = 0.0  # msprobe, unmasked
        self.msit_maxrel = self.msit_sumrel = 0.0
        self.msit_maxabs = self.msit_sumabs = 0.0
        self.mp_maxrel = 0.0
        self.cnt_1e3 = self.cnt_5e3 = 0
        self.max_ulp = self.sum_ulp = 0.0
        # online log-sum-exp for KL(softmax(g) || softmax(m))
        self.Mg = self.Mm = -np.inf
        self.Zg = self.Sg = self.Zm = 0.0
        # KL's stable form on d - c (c: the first chunk's p-weighted mean of
        # d = m - g; KL is shift invariant): Sg = sum e^(g-Mg) (d - c),
        # Bg = sum e^(g-Mg) (expm1(d - c) - (d - c)), without cancellation
        self.c: float | None = None
        self.Bg = 0.0
        # sum of exp(g - Mg) * ((g - Mg) - (m - Mm)): KL's first term relative to
        # the running maxima, for when the two softmaxes are far apart
        self.T = 0.0

    def update(self, g, m) -> CompareAccumulator:
        """Add one chunk (1-d arrays of equal length); returns ``self``."""
        g, m = np.asarray(g), np.asarray(m)
        if g.shape != m.shape or g.ndim != 1:
            raise ValueError(f"chunks must be 1-d of equal length, got {g.shape} and {m.shape}")
        if g.size == 0:
            return self
        for side, a in (("golden", g), ("mine", m)):
            if a.dtype.kind not in "biuf" and a.dtype not in _EXTRA_FLOATS:
                raise TypeError(f"{side} chunk has dtype {a.dtype}; valid: floats, fp8, "
                                "integers, bool")
        g = g.view(np.uint8) if g.dtype.kind == "b" else g
        m = m.view(np.uint8) if m.dtype.kind == "b" else m
        self.n += g.size
        self.bits_equal += int(np.count_nonzero(bitwise_equal(g, m)))
        # plain widening (integers beyond 2**53 round, as msprobe's float64 does)
        self._update(g.astype(np.float64), m.astype(np.float64))
        return self

    def _update(self, g: np.ndarray, m: np.ndarray) -> None:
        """One chunk in float64: value statistics, NaN/inf classes, the
        elementwise columns, then the aggregates (``_aggregates``)."""
        with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: NaN, as IEEE says
            sum_g, sum_m = float(np.sum(g)), float(np.sum(m))
        if math.isfinite(sum_g) and math.isfinite(sum_m):
            nonfin = None  # a finite sum means no NaN/inf in the chunk
        else:
            gn, mn = np.isnan(g), np.isnan(m)
            gi, mi = np.isinf(g), np.isinf(m)
            self.g_nan += int(np.count_nonzero(gn))
            self.m_nan += int(np.count_nonzero(mn))
            self.g_inf += int(np.count_nonzero(gi))
            self.m_inf += int(np.count_nonzero(mi))
            nonfin = gn | mn | gi | mi
        # value statistics of each side, IEEE (a NaN makes max/min/mean NaN; finish())
        gmax, gmin = float(np.max(g)), float(np.min(g))
        mmax, mmin = float(np.max(m)), float(np.min(m))
        self.g_max, self.g_min = max(self.g_max, gmax), min(self.g_min, gmin)
        self.m_max, self.m_min = max(self.m_max, mmax), min(self.m_min, mmin)
        self.g_sum += sum_g
        self.m_sum += sum_m
        if nonfin is not None and nonfin.any():
            bad = (gn != mn) | (gi != mi) | (gi & mi & (g != m))
            nbad = int(np.count_nonzero(bad))
            self.mismatch += nbad
            self.matched_nonfinite += int(np.count_nonzero(nonfin)) - nbad
            g = np.where(nonfin, 0.0, g)
            m = np.where(nonfin, 0.0, m)
            gmax, gmin = float(np.max(g)), float(np.min(g))
            mmax, mmin = float(np.max(m)), float(np.min(m))
        # elementwise columns: this module's formulas
        d = m - g
        ad = np.abs(d)
        ag = np.abs(g)
        dmax = float(ad.max())
        self.maxabs = max(self.maxabs, dmax)
        mask = _msit_mask(g)
        q = _msit_rel(g, m, mask)
        self.msit_maxrel = max(self.msit_maxrel, float(q.max()))
        self.msit_sumrel += float(q.sum())
        q = _msit_abs(ad, mask)
        self.msit_maxabs = max(self.msit_maxabs, float(q.max()))
        self.msit_sumabs += float(q.sum())
        q = _msprobe_rel(g, m, ad, ag)
        self.mp_maxrel = max(self.mp_maxrel, float(q.max()))
        self.cnt_1e3 += int(np.count_nonzero(q < 0.001))
        self.cnt_5e3 += int(np.count_nonzero(q < 0.005))
        with np.errstate(over="ignore"):  # inf when the error dwarfs a subnormal ulp
            q = ad / ref_ulp(ag, self.fmt)
        self.max_ulp = max(self.max_ulp, float(q.max()))
        self.sum_ulp += float(q.sum())
        del q, ag, ad, mask
        self._aggregates(g, m, d, max(gmax, -gmin), max(mmax, -mmin), dmax)

    def _aggregates(self, g, m, d, cg: float, cm: float, dmax: float) -> None:
        """Sums of squares, the dot product and the KL sums of one chunk
        (``cg``, ``cm``, ``dmax``: the chunk's max |g|, |m|, |m - g|)."""
        self._ssq("g", g, cg)
        self._ssq("m", m, cm)
        self._ssq("d", d, dmax)
        sg, sm = self.scale["g"], self.scale["m"]
        if sg > 0 and sm > 0:
            if _safe(cg) and _safe(cm):
                self.dot += _dot(g, m) / sg / sm
            else:
                self.dot += _dot(g / sg, m / sm)
        # KL(softmax(g) || softmax(m)) over the flattened tensor, online
        # log-sum-exp; with delta = m - g and p = softmax(g):
        #   KL = log E_p[exp(delta)] - E_p[delta] = log1p(E_p[expm1(delta)]) - E_p[delta]
        # (no cancellation between two log-sum-exps of nearly equal size)
        gmax = float(np.max(g))
        if gmax > self.Mg:
            f = math.exp(self.Mg - gmax)
            if self.Zg > 0:  # (g - Mg_new) = (g - Mg_old) + (Mg_old - Mg_new)
                self.T = f * (self.T + (self.Mg - gmax) * self.Zg)
            self.Zg *= f
            self.Sg *= f
            self.Bg *= f
            self.Mg = gmax
        # log-sum-exp of m too, for when E_p[exp(delta)] under- or overflows
        mmax = float(np.max(m))
        if mmax > self.Mm:
            if self.Zg > 0:  # -(m - Mm_new) = -(m - Mm_old) + (Mm_new - Mm_old)
                self.T += (mmax - self.Mm) * self.Zg
            self.Zm *= math.exp(self.Mm - mmax)
            self.Mm = mmax
        eg = np.exp(g - self.Mg)
        self.Zg += float(eg.sum())
        if self.c is None:
            self.c = _dot(eg, d) / float(eg.sum())
        with np.errstate(over="ignore", invalid="ignore"):
            t = d - m  # TwoDiff: d + e == m - g exactly (no overflow)
            e = (m - (d - t)) - (g + t)
        dc = (d - self.c) + np.where(np.isfinite(e), e, 0.0)  # d - c exact where d ~ c
        self.Sg += _dot(eg, dc)
        with np.errstate(over="ignore", invalid="ignore"):
            self.Bg += _dot(eg, _expm1_minus_x(dc))
        self.T += _dot(eg, (g - self.Mg) - (m - self.Mm))
        self.Zm += float(np.exp(m - self.Mm).sum())

    def _ssq(self, key: str, v: np.ndarray, cmax: float) -> None:
        """Update the scaled sum of squares ``sum (v/scale)^2`` of ``key``
        (``cmax`` = max |v| of the chunk); rescales the running dot product
        when the g or m scale grows."""
        old = self.scale[key]
        acc = self.ssq[key]
        if cmax > old:
            if old > 0:
                f = old / cmax
                acc *= f * f
                if key in ("g", "m"):
                    self.dot *= f
            self.scale[key] = old = cmax
        if old > 0 and cmax > 0:
            if _safe(cmax):
                acc += _dot(v, v) / old / old
            else:
                w = v / old
                acc += _dot(w, w)
        self.ssq[key] = acc

    def _norm(self, key: str) -> float:
        return self.scale[key] * math.sqrt(self.ssq[key])

    def _cosine(self, notes: list[str]) -> float:
        gnorm, mnorm = self._norm("g"), self._norm("m")
        if gnorm <= _EPS64 and mnorm <= _EPS64:
            return 1.0
        if mnorm <= _EPS64:
            notes.append("Cannot compare by Cosine Similarity, all the data is zero in my dump data.")
            return math.nan
        if gnorm <= _EPS64:
            notes.append("Cannot compare by Cosine Similarity, all the data is zero in golden dump data.")
            return math.nan
        return min(1.0, max(-1.0, self.dot / (math.sqrt(self.ssq["g"]) * math.sqrt(self.ssq["m"]))))

    def _kl(self) -> float:
        a, b = self.Sg / self.Zg, self.Bg / self.Zg
        s = a + b  # E_p[expm1(d - c)]
        if math.isfinite(s) and s > -0.5:
            # log1p(s) - a, = b + (log1p(s) - s) where the two would cancel
            kl = b + float(_log1p_minus_x(s)) if abs(s) < 0.25 else math.log1p(s) - a
        else:  # softmaxes far apart: KL = E_p[log p - log q] with both log-softmaxes
            # taken relative to their own maxima (no terms of the size of max|g|)
            kl = self.T / self.Zg + (math.log(self.Zm) - math.log(self.Zg))
        return max(kl, 0.0)

    def finish(self) -> tuple[dict, list[str]]:
        """``(columns, notes)``: the columns by their report names (msit's,
        msprobe's, ``max_ulp_error``/``mean_ulp_error``, value statistics,
        NaN/inf counts, ``bitwise_equal_ratio``) and the notes explaining
        NaN columns or zeroed NaN/inf.  Raises ValueError when nothing was fed."""
        n = self.n
        if n == 0:
            raise ValueError("CompareAccumulator.finish: no elements were fed (empty data)")
        gnan, mnan = bool(self.g_nan), bool(self.m_nan)
        notes: list[str] = []
        row = {
            "golden_max_value": np.nan if gnan else self.g_max,
            "golden_min_value": np.nan if gnan else self.g_min,
            "golden_mean_value": np.nan if gnan else self.g_sum / n,
            "my_max_value": np.nan if mnan else self.m_max,
            "my_min_value": np.nan if mnan else self.m_min,
            "my_mean_value": np.nan if mnan else self.m_sum / n,
            "golden_nan": self.g_nan, "golden_inf": self.g_inf,
            "my_nan": self.m_nan, "my_inf": self.m_inf,
            "nonfinite_mismatch": self.mismatch,
            "bitwise_equal_ratio": self.bits_equal / n,
        }
        gnorm, dnorm = self._norm("g"), self._norm("d")
        cols = {
            "cosine_similarity": self._cosine(notes),
            "max_relative_error": self.msit_maxrel,
            "mean_relative_error": self.msit_sumrel / n,
            "max_absolute_error": self.msit_maxabs,
            "mean_absolute_error": self.msit_sumabs / n,
            "kl_divergence": self._kl(),
            "relative_euclidean_distance": 0.0 if gnorm <= _EPS64 else dnorm / gnorm,
            "EucDist": dnorm,
            "MaxAbsErr": self.maxabs,
            "MaxRelativeErr": self.mp_maxrel,
            "One Thousandth Err Ratio": self.cnt_1e3 / n,
            "Five Thousandths Err Ratio": self.cnt_5e3 / n,
            "max_ulp_error": self.max_ulp,
            "mean_ulp_error": self.sum_ulp / n,
        }
        if self.mismatch:
            cols = dict.fromkeys(cols, np.nan)
            notes.append(
                f"The position of inf or nan in golden and my data do not match "
                f"({self.mismatch} of {n} elements; golden nan={self.g_nan} inf={self.g_inf}, "
                f"mine nan={self.m_nan} inf={self.m_inf})."
            )
        elif self.matched_nonfinite:
            notes.append(
                f"{self.matched_nonfinite} nan/inf at the same positions on both sides were set to 0 "
                "before comparing (msprobe handle_inf_nan)."
            )
        row.update(cols)
        return row, notes


def compare_columns(golden, mine, fmt: Format | str = "fp32") -> tuple[dict, list[str]]:
    """All columns of :class:`CompareAccumulator` for two whole arrays (one
    chunk; shapes must be equal, flattened in C order)."""
    g, m = np.asarray(golden), np.asarray(mine)
    if g.shape != m.shape:
        raise ValueError(f"golden and mine must have the same shape, got {g.shape} and {m.shape}")
    return CompareAccumulator(fmt).update(g.reshape(-1), m.reshape(-1)).finish()


# --------------------------------------------------------------------------
# PyTorch Inductor's acceptance rule
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class InductorResult:
    """Outcome of :func:`inductor_check`.

    ``passed``; ``reason`` (which branch decided: "dtype", "allclose",
    "cosine", "nan_corner", "rmse", "nan_both", "no_fp64"); ``res_error`` =
    rmse(fp64, compiled); ``ref_error`` = rmse(fp64, eager); ``multiplier``;
    ``threshold`` = multiplier * ref_error + tol / 10; ``cosine``.
    """

    passed: bool
    reason: str
    res_error: float = math.nan
    ref_error: float = math.nan
    multiplier: float = math.nan
    threshold: float = math.nan
    cosine: float = math.nan

    def __bool__(self) -> bool:
        return self.passed


def inductor_multiplier(
    numel: int,
    low_precision: bool,
    *,
    ndim4_1x1: bool = False,
    tol: float = 1e-4,
    use_larger_multiplier_for_smaller_tensor: bool = False,
    force_max_multiplier: bool = False,
) -> float:
    """The multiplier of ``get_multiplier`` in ``torch._dynamo.utils.same``
    (torch 2.13.0): 10 when forced; else 3 for fp16/bf16 results, 2 otherwise;
    with ``use_larger_multiplier_for_smaller_tensor`` 10 for ``numel <= 10``
    and 8 for ``numel <= 500``; else 3 when ``numel < 1000``, for a 4-d
    ``[..., 1, 1]`` tensor, or when ``tol >= 2e-2``."""
    if force_max_multiplier:
        return 10.0
    m = 3.0 if low_precision else 2.0
    if use_larger_multiplier_for_smaller_tensor and numel <= 10:
        m = 10.0
    elif use_larger_multiplier_for_smaller_tensor and numel <= 500:
        m = 8.0
    elif numel < 1000 or ndim4_1x1 or tol >= 2 * 1e-2:
        m = 3.0
    return m


def _allclose(a: np.ndarray, b: np.ndarray, tol: float, equal_nan: bool) -> bool:
    # torch.allclose(a, b, rtol, atol): |a - b| <= atol + rtol * |b|, infinities equal when same
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=equal_nan))


def _to_dtype_like_torch(x64: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``torch.from_numpy(x64).to(dtype)`` as float64: what ``same`` compares.

    torch converts float64 to float16, bfloat16 and fp8 through float32 (the
    c10 types are built from a float), so the value is rounded twice: to
    float32, then to ``dtype``, both round-to-nearest-even.  numpy's float64
    -> float16 rounds once and differs from torch on the ties that the first
    rounding creates (``1 + 2**-11 + 2**-40``: numpy ``1 + 2**-10``, torch
    ``1``); ml_dtypes' bfloat16/fp8 casts already go through float32.
    :func:`numlab.round_to` rounds once, so it is not what torch does here.
    """
    if dtype.itemsize < 4:
        x64 = x64.astype(np.float32)
    return x64.astype(dtype).astype(np.float64)


def inductor_check(
    fp64_ref,
    eager,
    compiled,
    *,
    tol: float = 1e-4,
    cos_similarity: bool = False,
    equal_nan: bool = False,
    low_precision: bool | None = None,
    use_larger_multiplier_for_smaller_tensor: bool = False,
    force_max_multiplier: bool = False,
) -> InductorResult:
    """PyTorch Inductor's accuracy check of a compiled result.

    Transcribes the tensor branch of ``same(ref, res, fp64_ref, ...)`` in
    ``torch/_dynamo/utils.py`` of torch 2.13.0, with ``ref = eager`` and
    ``res = compiled``:

    1. dtypes of eager and compiled must match (``exact_dtype=True``);
    2. cosine mode: pass when ``allclose(eager, compiled, tol, tol,
       equal_nan=True)`` on float32 copies, else when the cosine similarity
       (torch's ``cosine_similarity(dim=0, eps=1e-6)``) is ``>= 0.99``;
    3. otherwise pass when ``allclose(eager, compiled, atol=tol, rtol=tol)``;
    4. else, with an fp64 reference: pass when the reference and compiled
       have no NaN, eager does, and ``allclose(fp64_ref.to(dtype), compiled,
       0.04, 0.04)`` ("nan_corner"; ``.to(dtype)`` rounds through float32
       like torch, see :func:`_to_dtype_like_torch`); otherwise pass when
       ``rmse(fp64, compiled) <= multiplier * rmse(fp64, eager) + tol / 10``
       (:func:`inductor_multiplier`), or both rmse are NaN with
       ``equal_nan``.

    ``rmse`` here is torch's plain ``sqrt(mean((ref - res)**2))`` in float64.
    ``low_precision`` (fp16/bf16 result; default: from ``compiled.dtype``)
    lets float32 containers holding fp16 values use the fp16 multiplier.
    Arithmetic is float64 numpy, so allclose decisions within one rounding of
    the tolerance may differ from torch's in-dtype arithmetic.
    """
    e_arr, c_arr = np.asarray(eager), np.asarray(compiled)
    if e_arr.dtype != c_arr.dtype:
        return InductorResult(False, "dtype")
    ref64 = as_f64(fp64_ref, "fp64_ref")
    e, c = as_f64(e_arr, "eager"), as_f64(c_arr, "compiled")
    if not (ref64.shape == e.shape == c.shape):
        raise ValueError(
            f"fp64_ref, eager and compiled must have the same shape, got {ref64.shape}, {e.shape}, {c.shape}"
        )
    if low_precision is None:
        low_precision = c_arr.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
    if cos_similarity:
        e32 = e.ravel().astype(np.float32).astype(np.float64)
        c32 = c.ravel().astype(np.float32).astype(np.float64)
        if _allclose(e32, c32, tol, True):
            return InductorResult(True, "allclose")
        with np.errstate(invalid="ignore", over="ignore"):
            num = float(np.dot(e32, c32))
            den = max(float(np.linalg.norm(e32)), 1e-6) * max(float(np.linalg.norm(c32)), 1e-6)
        score = num / den
        return InductorResult(bool(score >= 0.99), "cosine", cosine=score)
    if _allclose(e, c, tol, equal_nan):
        return InductorResult(True, "allclose")
    if np.asarray(fp64_ref).dtype != np.float64:
        return InductorResult(False, "no_fp64")
    if (not np.isnan(ref64).any() and not np.isnan(c).any() and np.isnan(e).any()):
        ref_in = _to_dtype_like_torch(ref64, c_arr.dtype) if c_arr.dtype.kind == "f" or c_arr.dtype in _EXTRA_FLOATS else ref64
        if _allclose(ref_in, c, 4e-2, equal_nan):
            return InductorResult(True, "nan_corner")

    def _rmse(a, b):
        with np.errstate(invalid="ignore", over="ignore"):
            return float(np.sqrt(np.mean(np.square(a - b))))

    ref_error = _rmse(ref64, e)
    res_error = _rmse(ref64, c)
    ndim4 = e.ndim == 4 and e.shape[-1] == e.shape[-2] == 1
    mult = inductor_multiplier(
        ref64.size, low_precision, ndim4_1x1=ndim4, tol=tol,
        use_larger_multiplier_for_smaller_tensor=use_larger_multiplier_for_smaller_tensor,
        force_max_multiplier=force_max_multiplier,
    )
    thr = mult * ref_error + tol / 10.0
    passed = res_error <= thr
    reason = "rmse"
    if not passed and equal_nan and math.isnan(ref_error) and math.isnan(res_error):
        passed, reason = True, "nan_both"
    return InductorResult(bool(passed), reason, res_error, ref_error, mult, thr)


# --------------------------------------------------------------------------
# the bundle
# --------------------------------------------------------------------------
def error_stats(ref, x, fmt: Format | str | None = None, *, tiny: float = 0.0) -> dict:
    """All metrics of ``x`` against ``ref`` in one dict.

    Keys
    ----
    ``n``; counts ``nan_ref``, ``nan_x``, ``inf_ref``, ``inf_x``,
    ``nonfinite_match``, ``nonfinite_mismatch``, ``n_finite``;
    ``abs_max``, ``abs_mean``, ``abs_p50``, ``abs_p99`` and the same for
    ``rel_`` (:func:`abs_error`, :func:`rel_error` with ``tiny``, nearest-rank
    percentiles, over all elements following the NaN/inf policy);
    ``bitwise_equal`` (share, :func:`bitwise_equal`); ``cosine``,
    ``kl_divergence``, ``relative_euclidean``, ``euclidean``, ``rmse``
    (``nonfinite="propagate"``); ``err_ratio_0.001`` and ``err_ratio_0.005``
    (msprobe's one-thousandth / five-thousandths ratios); and when ``fmt`` is
    given ``ulp_max``, ``ulp_mean``, ``ulp_p50``, ``ulp_p99`` (:func:`ulp_distance`
    to ``ref`` rounded to ``fmt``), ``ulp0``, ``ulp1``, ``ulp_ge2`` (shares),
    ``ulp_err_max`` (:func:`ulp_error`, fractional).
    Empty input gives NaN statistics and zero counts.
    """
    r, y = _pair(ref, x)
    m = _masks(r, y)
    n = r.size
    out: dict = {
        "n": n,
        "nan_ref": int(np.count_nonzero(np.isnan(r))),
        "nan_x": int(np.count_nonzero(np.isnan(y))),
        "inf_ref": int(np.count_nonzero(np.isinf(r))),
        "inf_x": int(np.count_nonzero(np.isinf(y))),
        "nonfinite_match": int(np.count_nonzero(m["match"])),
        "nonfinite_mismatch": int(np.count_nonzero(m["mismatch"])),
        "n_finite": int(np.count_nonzero(m["finite"])),
    }
    ae = abs_error(r, y)
    re_ = rel_error(r, y, tiny=tiny)
    for name, e in (("abs", ae), ("rel", re_)):
        out[f"{name}_max"] = float(e.max()) if n else math.nan
        out[f"{name}_mean"] = float(e.mean()) if n else math.nan
        out[f"{name}_p50"] = percentile(e, 50)
        out[f"{name}_p99"] = percentile(e, 99)
    out["bitwise_equal"] = bitwise_equal_share(r, y)
    out["cosine"] = cosine_similarity(r, y)
    out["kl_divergence"] = kl_divergence(r, y) if n else math.nan
    out["relative_euclidean"] = relative_euclidean(r, y)
    out["euclidean"] = euclidean(r, y)
    out["rmse"] = rmse(r, y)
    out["err_ratio_0.001"] = error_ratio(r, y, 1e-3) if n else math.nan
    out["err_ratio_0.005"] = error_ratio(r, y, 5e-3) if n else math.nan
    if fmt is not None:
        f = get_format(fmt)
        d = ulp_distance(r, y, f)
        out["ulp_max"] = float(d.max()) if n else math.nan
        out["ulp_mean"] = float(d.mean()) if n else math.nan
        out["ulp_p50"] = percentile(d, 50)
        out["ulp_p99"] = percentile(d, 99)
        out.update(ulp_shares(d))
        ue = ulp_error(r, y, f)
        out["ulp_err_max"] = float(ue.max()) if n else math.nan
    return out
