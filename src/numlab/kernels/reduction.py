"""Reductions with an explicit summation order and accumulator format.

:func:`reduce` computes ``sum``, ``mean``, ``max``, ``min``, ``sumsq`` and
``var`` along one axis; every addition is rounded to the accumulator format
``acc`` (see :mod:`numlab.kernels._common` for how) in the order given, an
:class:`~numlab.kernels.orders.Order` or its string (:mod:`numlab.kernels.orders`
lists them).  The reduced axis is moved last.  ``sum``, ``sumsq`` and ``mean``
by an order with a fast path round the input to ``acc`` one row chunk at a time
(:func:`numlab.kernels.orders.fast._sum_fast`); everything else rounds the
whole array, then sums by the order.  :func:`welford` is the engine's one-pass
mean and variance, the same operations as ``variance="welford"``.
"""

from __future__ import annotations

import numpy as np

from ..formats import NARROW_DTYPES, Format, get_format
from . import _accel
from ._common import Arith, as_values, check_choice, round_to, to_container, welford_steps
from .libm import fma32
from .orders import as_order
from .orders.cpu import ceil_log2
from .orders.fast import _fast_acc, _sum_fast

__all__ = ["reduce", "welford", "rowwise_moments", "OPS", "VARIANCE_ALGORITHMS"]
# private but used by tests: _reduce_reference (the reference path of reduce)

OPS = ("sum", "mean", "max", "min", "sumsq", "var")
VARIANCE_ALGORITHMS = ("two_pass", "welford", "textbook")


def _raw_values(x, name: str = "x") -> np.ndarray:
    """``x`` as an ndarray of its own float container, not converted (as_values' checks)."""
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype not in NARROW_DTYPES:
        as_values(a, name)  # raises the TypeError naming the dtype
    return a


def _prepare(x, axis, acc: Format, rounding: str, *, convert: bool = True):
    """Validate ``x``/``axis``; move ``axis`` last; round to ``acc`` unless ``convert=False``."""
    a = _raw_values(x)
    if a.ndim == 0:
        raise ValueError("x must have at least one dimension to reduce")
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis={axis} is out of range for an array of {a.ndim} dimensions")
    ar = Arith(acc, rounding)
    a = np.moveaxis(a, axis, -1)
    return (ar.round(a) if convert else a), ar, axis % (a.ndim)


def reduce(
    x,
    op: str,
    axis: int = -1,
    *,
    order="pairwise",
    acc="fp32",
    out=None,
    keepdims: bool = False,
    variance: str = "two_pass",
    correction: int = 0,
    acc_rounding: str = "rne",
    out_rounding: str = "rne",
):
    """Reduce ``x`` along ``axis`` with an explicit order and accumulator format.

    Parameters
    ----------
    x : array_like
        Float container (float64/float32/float16/bfloat16/fp8) of values.
        Values are first rounded to ``acc`` (exact when ``x`` is in a storage
        format that ``acc`` contains, e.g. fp16 data with an fp32 accumulator).
    op : {"sum", "mean", "max", "min", "sumsq", "var"}
        ``mean`` = fl(sum / n); ``sumsq`` sums fl(x*x); ``var`` by ``variance``.
    axis : int
        The axis reduced.
    order : Order or str
        Summation order (module docstring); default pairwise.
    acc : Format or str
        Accumulator format; every addition rounds to it.  fp16/bf16 show
        stagnation (summing ones in fp16 stops at 2048).
    out : Format or str, optional
        Format of the result (rounded once from ``acc``); default ``acc``.
    keepdims : bool
    variance : {"two_pass", "welford", "textbook"}
        ``two_pass``: m = mean(x) (order), fl(sum(fl(fl(x-m)^2)))/(n-correction);
        ``welford``: sequential update (Welford 1962) ``d = x-m; m += d/k;
        M2 += d*(x-m)`` (the order is not used: it is inherently sequential);
        ``textbook``: (sum(x^2) - sum(x)^2/n)/(n-correction), each sum by ``order``.
    correction : int
        Delta degrees of freedom of ``var``.
    acc_rounding, out_rounding : str
        Rounding modes of the accumulator operations and of the final rounding.

    Returns
    -------
    ndarray
        In ``out.container`` (float16 for fp16, bfloat16 for bf16, float32,
        float64).  NaN and inf propagate as IEEE 754 says.
    """
    return _reduce(x, op, axis, order, acc, out, keepdims, variance, correction, acc_rounding, out_rounding,
                   reference=False)


def _reduce_reference(x, op: str, axis: int = -1, *, order="pairwise", acc="fp32", out=None,
                      keepdims: bool = False, variance: str = "two_pass", correction: int = 0,
                      acc_rounding: str = "rne", out_rounding: str = "rne"):
    """:func:`reduce` on the reference path only: the whole array rounded to ``acc``
    at once and every order's :meth:`Order._sum_reference` (its loops over the last
    axis).  Kept callable so tests can prove the fast path bit-identical to it."""
    return _reduce(x, op, axis, order, acc, out, keepdims, variance, correction, acc_rounding, out_rounding,
                   reference=True)


def _reduce(x, op, axis, order, acc, out, keepdims, variance, correction, acc_rounding, out_rounding, *,
            reference: bool):
    check_choice("op", op, OPS)
    check_choice("variance", variance, VARIANCE_ALGORITHMS)
    acc = get_format(acc, "acc")
    outf = acc if out is None else get_format(out, "out")
    order = as_order(order)
    a, ar, ax = _prepare(x, axis, acc, acc_rounding, convert=False)
    n = a.shape[-1]
    fa = None if reference or not order._has_fast() else _fast_acc(ar)
    if fa is not None and op in ("sum", "sumsq", "mean"):
        # chunked: the input is rounded to acc one row chunk at a time (no full copy)
        r = _sum_fast(a, order, fa, ar, prepared=False, square=op == "sumsq")
        if op == "mean":
            r = ar.div(r, ar.round(np.float64(n)))
    else:
        xw = ar.round(a)
        osum = order._sum_reference if reference else order._sum
        if op in ("max", "min"):
            if n == 0:
                raise ValueError(f"op={op!r} of an empty axis has no identity")
            r = np.max(xw, axis=-1) if op == "max" else np.min(xw, axis=-1)
        elif op == "sum":
            r = osum(xw, ar)
        elif op == "sumsq":
            r = osum(ar.mul(xw, xw), ar)
        elif op == "mean":
            r = ar.div(osum(xw, ar), ar.round(np.float64(n)))
        else:
            r = _variance(xw, osum, ar, variance, correction)
    r = np.asarray(r)
    if keepdims:
        r = np.expand_dims(r, ax)

    if outf == acc and out_rounding == "rne":
        res = r
    else:
        res = round_to(r, outf, out_rounding)
    res = to_container(res, outf)
    return res[()] if res.ndim == 0 else res


def _variance(xw, osum, ar, algo, correction):
    """Variance by ``algo``; ``osum(values, ar)`` sums the last axis in the chosen order."""
    n = xw.shape[-1]
    if not isinstance(correction, int | np.integer) or correction < 0:
        raise ValueError(f"correction={correction!r} is not valid; it must be an int >= 0")
    nd = ar.round(np.float64(n - correction))
    if algo == "two_pass":
        m = ar.div(osum(xw, ar), ar.round(np.float64(n)))
        d = ar.sub(xw, m[..., None])
        return ar.div(osum(ar.mul(d, d), ar), nd)
    if algo == "textbook":
        s = osum(xw, ar)
        q = osum(ar.mul(xw, xw), ar)
        return ar.div(ar.sub(q, ar.div(ar.mul(s, s), ar.round(np.float64(n)))), nd)
    # welford
    m = np.zeros(xw.shape[:-1], dtype=ar.dtype)
    _, m2 = welford_steps(np.moveaxis(xw, -1, 0), ar, m, np.zeros_like(m))
    return ar.div(m2, nd)


# --------------------------------------------------------------------------
# the engine's Welford (mean and variance in one pass): the fast path of _variance's
# welford branch, with the compiled float32 loop
# --------------------------------------------------------------------------
def welford(x: np.ndarray, ar, correction: int):
    """Welford's mean and variance along the last axis with every operation
    rounded by ``ar`` (a ``kernels._common.Arith``): the same operations in
    the same order as ``reduce(op="var", variance="welford")`` (:func:`_variance`)
    (``d = x_k - m; m = m + d/fl(k+1); M2 = M2 + d*(x_k - m)``; var
    ``M2/fl(n - correction)``), so the variance is bitwise the kernel's (tested).
    Runs on a transposed contiguous copy (each step reads one contiguous
    row) with preallocated buffers when ``ar`` is native fp32, compiled
    (:func:`numlab.kernels._accel.welford32`, bit-identical; ``NUMLAB_ACCEL=0``
    keeps the numpy loop) when numba is installed.

    Returns (mean, var) in ``ar``'s working dtype, shape ``x.shape[:-1]``.
    """
    n = x.shape[-1]
    lead = x.shape[:-1]
    xt = _transpose2d(np.asarray(ar.round(x)).reshape(-1, n))  # (n, rows)
    m = np.zeros(xt.shape[1:], dtype=ar.dtype)
    m2 = np.zeros_like(m)
    with np.errstate(all="ignore"):
        # compiled: the same float32 operations in the same order (numba)
        if not (ar.native and ar.dtype == np.float32 and _accel.welford32(xt, m, m2)):
            m, m2 = welford_steps(xt, ar, m, m2)
        var = ar.div(m2, ar.round(np.float64(n - correction)))
    return np.asarray(m).reshape(lead), np.asarray(var).reshape(lead)


def _transpose2d(a: np.ndarray, block: int = 128) -> np.ndarray:
    """A contiguous copy of ``a.T`` made tile by tile (``block`` x ``block``),
    so reads and writes stay in cache (a plain strided transpose of a large
    array is several times slower)."""
    r, n = a.shape
    out = np.empty((n, r), dtype=a.dtype)
    if r * n <= block * block * 4:
        out[...] = a.T
        return out
    for i in range(0, r, block):
        for j in range(0, n, block):
            out[j:j + block, i:i + block] = a[i:i + block, j:j + block].T
    return out


def rowwise_moments(x, L: int, fma=(True, True, False, True), widen: bool = False):
    """ATen ``RowwiseMoments`` (``aten/src/ATen/native/cpu/moments_utils.h``) over the
    last axis: (mean, var) fp32, the moments ATen's LayerNorm kernel computes.

    ``L`` lanes; chunks of 16 vectors updated by Welford with ``c = 1/(j+1)``,
    chunk moments merged by ``AddMomentsVec`` into a cascade stack, the scalar
    tail by Welford, then the ``L`` lanes merged one by one by ``AddMoments``.
    ``fma = (update, merge_vec, tail, merge_lanes)``: where GCC contracted
    ``a += b * c`` into one FMA in ATen's build -- the vector Welford update,
    the vector ``AddMomentsVec``, the scalar tail, the scalar ``AddMoments``
    merging the lanes (measured).  ``widen`` (bf16/fp16 input): a vector load holds
    ``2L`` elements whose two fp32 halves get two Welford accumulators per chunk,
    both merged into the stack (``UpdateMomentsVec`` for reduced types); the lane
    merge then counts ``2n`` elements per lane.
    """
    x = np.asarray(x, np.float32)
    N = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, N)
    R = x2.shape[0]
    kChunk = 16
    VL = 2 * L if widen else L  # elements per vector load
    n = N // VL
    m = -(-n // kChunk)
    f = np.float32

    def _ma(use):
        return fma32 if use else (lambda a, b, c: a * b + c)

    ma_upd, ma_vec, ma_tail, ma_sc = (_ma(u) for u in fma)
    depth = ceil_log2(m) if m > 0 else 0
    size = max(depth, 1)
    m0_stk = [0] * size
    m1_stk = [np.zeros((R, L), f) for _ in range(size)]
    m2_stk = [np.zeros((R, L), f) for _ in range(size)]
    c_vecs = [f(1) / f(j + 1) for j in range(kChunk)]

    def add_moments(m0_add, m1_add, m2_add, m0, m1, m2, scalar=False):
        # AddMomentsVec (vector stack merges): m1 + c*delta,
        #   fma(delta, (delta*c)*m0, m2 + m2_add);
        # AddMoments (scalar lane merges): fma(c, delta, m1), m2 + fma(t, m0, m2_add)
        # with t = delta*delta*c (the contractions GCC chose, measured: 100% of the
        # rstd of 512 rows for n = 256..5000 except one row in ~500)
        nn = m0 + m0_add
        c = f(0) if nn == 0 else f(m0_add) / f(nn)
        delta = m1_add - m1
        t = (delta * delta) * c
        if scalar:
            m1 = ma_sc(np.full_like(delta, c), delta, m1)
            m2 = m2 + ma_sc(t, f(m0), m2_add)
        else:
            m1 = m1 + c * delta
            m2 = ma_vec(delta, (delta * c) * f(m0), m2 + m2_add)
        return nn, m1, m2

    with np.errstate(all="ignore"):
        for i in range(m):
            cnt = min(kChunk, n - i * kChunk)
            halves = 2 if widen else 1
            for h in range(halves):
                m1v = np.zeros((R, L), f)
                m2v = np.zeros((R, L), f)
                for j in range(cnt):
                    base = (i * kChunk + j) * VL + h * L
                    xv = x2[:, base:base + L]
                    d = xv - m1v
                    m1v = ma_upd(d, np.full_like(d, c_vecs[j]), m1v)
                    m2v = ma_upd(d, xv - m1v, m2v)
                m0_stk[0], m1_stk[0], m2_stk[0] = add_moments(cnt, m1v, m2v, m0_stk[0], m1_stk[0],
                                                              m2_stk[0])
            mask = i + 1
            j = 1
            while j < depth and (mask & 1) == 0:
                m0_stk[j], m1_stk[j], m2_stk[j] = add_moments(
                    m0_stk[j - 1], m1_stk[j - 1], m2_stk[j - 1], m0_stk[j], m1_stk[j], m2_stk[j])
                m0_stk[j - 1] = 0
                m1_stk[j - 1] = np.zeros((R, L), f)
                m2_stk[j - 1] = np.zeros((R, L), f)
                mask >>= 1
                j += 1
        for i in range(1, depth):
            m0_stk[0], m1_stk[0], m2_stk[0] = add_moments(
                m0_stk[i], m1_stk[i], m2_stk[i], m0_stk[0], m1_stk[0], m2_stk[0])
        m1_arr, m2_arr = m1_stk[0], m2_stk[0]
        m0 = 0
        m1 = np.zeros(R, f)
        m2 = np.zeros(R, f)
        for i in range(n * VL, N):
            d = x2[:, i] - m1
            m0 += 1
            m1 = m1 + d / f(m0)
            m2 = ma_tail(d, x2[:, i] - m1, m2)
        for i in range(L):
            m0, m1, m2 = add_moments(n * VL // L, m1_arr[:, i], m2_arr[:, i], m0, m1, m2, scalar=True)
        var = m2 / f(N)
    return m1.reshape(lead), var.reshape(lead)
