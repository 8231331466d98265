"""K-tiled matrix multiply with an explicit accumulator.

``C = A @ B`` with ``A`` (..., M, K) and ``B`` (K, N) (or batched (..., K, N)),
inputs holding values of at most 26 significant bits (fp32 and narrower), so
every product ``a_ik b_kj`` is exact in float64 (it has at most 48 bits and its
exponent stays inside float64's normal range).  K is cut into tiles of
``k_tile``; ``acc`` is the accumulator format and ``out`` the result's.

Algorithms (``algo=``; what each one models)
--------------------------------------------
``"sequential"``
    A vector unit's multiply-accumulate loop, per K tile: a fresh tile
    accumulator ``t = -0; t = fl(t + fl(a_k b_k))`` for k in the tile (or, with
    ``fma=True``, ``t = fl(t + a_k b_k)`` with one rounding), then
    ``C = fl(C + t)``.  This is ``Blocked(k_tile, sequential, sequential)`` of
    the rounded products; ``k_tile >= K`` gives plain recursive accumulation.
    One vectorised rank-1 update of the (M, N) accumulator per k (no BLAS: the
    order inside a BLAS call is unknown).
``"block_fma"``
    A tensor core / cube unit: per K tile, the products are exact and summed
    exactly, and the tile sum is added to the accumulator with ONE rounding,
    ``C = fl(C + sum_{k in tile} a_k b_k)`` (NVIDIA's MMA with fp32
    accumulation; here exactly rounded, i.e. the idealised unit).  One float64
    BLAS call per K tile computes ``S_hat``.  Common case (2-D operands, short
    inputs such as fp16/bf16 of moderate range): per row ``i`` and column ``j``,
    if ``sum|a_i.| max|b_.j| < 2^(53 + min lsb(a_i.) + min lsb(b_.j))``
    every partial sum is an integer multiple of the products' lowest bit with at
    most 53 bits, so ``S_hat = S`` exactly in any order
    (:func:`_exact_tile_factors`, one outer product of per-row and per-column
    factors); then ``fl_acc(C + S)`` is one cast for fp32 (plus a bit test for
    the fp32 midpoints that ``fl64(C + S)`` can land on, fixed with TwoSum) or
    :func:`round_sum2` otherwise, and only the pairs that fail the factor test
    are certified one by one as below (:func:`_tile_certified_exact`).  Wide
    exponent spreads and 24-bit fp32 values take the general path: the float64
    sum has error at most
    ``gamma_{k_tile} sum|a_k b_k|`` in ANY order (Higham eq. 3.5), so with
    ``v_hat = fl(C + S_hat)`` the exact ``C + S`` lies in ``[v_hat - B, v_hat + B]``
    with ``B_i = (1+2^-50) gamma_{k_tile} k_tile max_k|a_ik| max|b|
    + 2^-51 (max_j|c_ij| + k_tile max_k|a_ik| max|b|)`` (the 2^-51 terms cover the
    rounding of ``C + S_hat`` and of ``v_hat -+ B`` with a factor 2 to spare).
    Rounding is monotone: where both ends round to the same ``acc`` value, that
    value is the correct rounding (certificate 1).  Exact ties are common
    (sums of short products land on midpoints); for those the exact value is a
    multiple of ``q = 2^min_k(lsb(a_ik) + lsb(b_kj))`` (and of lsb(c_ij)), so
    ``B < q/2`` pins it to ``rint(v_hat/q) q`` (certificate 2).  What is left is
    re-bounded per entry with ``gamma_n sum|t|`` and, rarely, summed exactly
    (math.fsum plus a round-to-odd residual).  So the result is bit-exact, not
    "usually right"; ``stats["uncertified"]`` counts the exact sums.  The
    certification works over row chunks that stay in cache after the one BLAS
    call per K tile.
``"split_k"``
    Split-K GEMM: each K tile is computed like a ``block_fma`` tile into its
    own fresh accumulator, ``P_t = fl(sum_{k in tile} a_k b_k)`` (one
    rounding), the partials are written out in ``acc`` and then reduced by
    ``split_order`` (default pairwise) in ``acc`` -- a separate reduction
    kernel, as cuBLAS/CUTLASS split-K does.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..formats import FP32, FP64, Format, get_format
from . import _accel
from ._common import (
    Arith,
    _two_sum,
    as_values,
    check_choice,
    round_odd_pair,
    round_sum2,
    round_to,
    to_container,
)
from .orders import as_order, gamma

# products of at least this many entries use the compiled post-BLAS pass when numba
# is installed (numlab.kernels._accel.add_round32; same bits as the numpy loop)
_ACCEL_MIN_ENTRIES = 1 << 16

__all__ = ["matmul", "MATMUL_ALGOS", "exact_dot_round"]

MATMUL_ALGOS = ("sequential", "block_fma", "split_k")


def _rnd(v: np.ndarray, fmt: Format, rounding: str) -> np.ndarray:
    """Round float64 values to fmt (fast native cast for fp32/rne)."""
    if fmt == FP64:
        return v
    if fmt == FP32 and rounding == "rne":
        with np.errstate(over="ignore"):
            return v.astype(np.float32).astype(np.float64)
    return round_to(v, fmt, rounding)


def exact_dot_round(terms, fmt, rounding: str = "rne") -> float:
    """Correctly rounded ``sum(terms)`` in ``fmt`` for a 1-D float64 sequence whose
    sum is exact in binary (math.fsum gives RN(sum); the residual's sign, from a
    second fsum, drives round-to-odd).  Used for uncertified entries."""
    terms = [float(t) for t in terms]
    if not all(math.isfinite(t) for t in terms):
        return float(_rnd(np.asarray([sum(terms)]), get_format(fmt), rounding)[0])
    r = math.fsum(terms)
    if not math.isfinite(r):
        return float(_rnd(np.asarray([r]), get_format(fmt), rounding)[0])
    e = math.fsum(terms + [-r])
    ro = round_odd_pair(np.asarray([r]), np.asarray([e]))
    return float(_rnd(ro, get_format(fmt), rounding)[0])


def _lsb_exp(x: np.ndarray) -> np.ndarray:
    """Exponent of the lowest set bit of each float64 value (``x = odd * 2**lsb``);
    a large sentinel (4096) for zeros and non-finite values."""
    bits = x.view(np.int64)
    biased = (bits >> 52) & 0x7FF
    frac = bits & ((1 << 52) - 1)
    sig = np.where(biased > 0, frac | (1 << 52), frac)
    low = sig & (-sig)
    tz = np.frexp(np.maximum(low, 1).astype(np.float64))[1].astype(np.int64) - 1  # exact: powers of two
    e = np.where(biased > 0, biased - 1075, -1074) + tz
    return np.where((sig == 0) | (biased == 0x7FF), 4096, e)


def _lsb_exp32(x: np.ndarray) -> np.ndarray:
    """:func:`_lsb_exp` for float32 values (int16 result; sentinel 4096): with
    ``x = m 2^e`` (frexp), ``n = m 2^24`` is an exact integer and the lowest set
    bit of ``x`` is ``2^(e - 24 + tz(n))``."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        m, e = np.frexp(x)
        n = (m * np.float32(16777216.0)).astype(np.int32)
    n &= -n
    tz = np.frexp(n.astype(np.float32))[1]
    e += tz
    e -= 25
    bad = (x == 0) | ~np.isfinite(x)
    e[bad] = 4096
    return e.astype(np.int16)


@functools.lru_cache(maxsize=4)
def _lsb_table(dt: np.dtype) -> np.ndarray:
    """Lowest-set-bit exponent of every 16-bit code of float16 / bfloat16 (int16)."""
    vals = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(dt).astype(np.float32)
    return _lsb_exp32(vals)


def _lsb_of_input(orig: np.ndarray, widened: np.ndarray) -> np.ndarray:
    """Lowest-set-bit exponents of a matmul operand: one table lookup per element for
    16-bit containers, else :func:`_lsb_exp32` of the float32 values."""
    if orig.dtype.itemsize == 2 and orig.dtype.kind in "fV":
        return np.take(_lsb_table(orig.dtype), np.ascontiguousarray(orig).view(np.uint16))
    return _lsb_exp32(widened)


def _tile_exact_plus(c: np.ndarray, a_t: np.ndarray, b_t: np.ndarray, acc: Format, rounding: str,
                     la_t=None, lb_t=None):
    """fl_acc(c + a_t @ b_t) with one rounding, certified (module docstring).

    Certificate (1): both ends of ``[v_hat - B, v_hat + B]`` round to the same
    value (monotonicity of rounding).  Entries it does not settle (exact ties
    are common: sums of short products often land on a midpoint of acc) get
    certificate (2): the exact value is a multiple of ``q = 2**min(lsb(a_ik) +
    lsb(b_kj), lsb(c_ij))``, so if ``B < q/2`` it is ``rint(v_hat/q) q``.  The
    rest go to :func:`_certify_rows` (tight per-entry bound), then, rarely, to
    exact Python summation.
    """
    kt = a_t.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.matmul(a_t, b_t)  # one BLAS call
        amax = np.max(np.abs(a_t), axis=-1)  # (..., M)
        bmax = np.max(np.abs(b_t), axis=-2)  # (..., N)
        g = gamma(kt, 2.0**-53)
        # B_ij = gamma_kt * kt * amax_i * bmax_j            (BLAS error, any order)
        #      + 2^-51 * (cmax_i + kt * amax_i * bmax_j)     (>= 2^-51 |v|: rounding of c + S)
        alpha = (g * (1 + 2.0**-50) + 2.0**-51) * kt * amax
        fast = acc == FP32 and rounding == "rne"
        if fast:
            # Per-row bound T_i = max_j B_ij.  The float64 sums are cast to float32
            # (round-to-nearest-even) as they are written, and the work runs over
            # row chunks that stay in cache after the one BLAS call.
            N = v.shape[-1]
            V = v.reshape(-1, N)
            Cb = np.broadcast_to(c, v.shape).reshape(-1, N)
            arow = np.broadcast_to(alpha * np.max(bmax, axis=-1, keepdims=True), v.shape[:-1]).reshape(-1)
            lo32 = np.empty(V.shape, np.float32)
            hi32 = np.empty(V.shape, np.float32)
            okf = np.empty(V.shape, bool)
            Tvec = np.empty(V.shape[0])
            rc = max(1, 32768 // max(N, 1))
            for r0 in range(0, V.shape[0], rc):
                r1 = r0 + rc
                vv, cc = V[r0:r1], Cb[r0:r1]
                vv += cc
                cm = np.maximum(np.max(cc, axis=-1), -np.min(cc, axis=-1)).astype(np.float64)
                Tvec[r0:r1] = arow[r0:r1] + 2.0**-51 * np.where(np.isnan(cm), np.inf, cm)
                T = Tvec[r0:r1, None]
                np.subtract(vv, T, out=lo32[r0:r1], casting="same_kind")
                np.add(vv, T, out=hi32[r0:r1], casting="same_kind")
                np.equal(lo32[r0:r1], hi32[r0:r1], out=okf[r0:r1])
            ok = okf.reshape(v.shape)
            res = lo32.reshape(v.shape)
            t = np.broadcast_to(Tvec.reshape(v.shape[:-1])[..., None], v.shape)
        else:
            v += c
            cmax = np.max(np.abs(np.broadcast_to(c, v.shape)), axis=-1)
            cmax = np.where(np.isnan(cmax), np.inf, cmax)
            t = alpha[..., :, None] * bmax[..., None, :]
            t += (2.0**-51 * cmax)[..., :, None]
            lo, hi = _rnd(v - t, acc, rounding), _rnd(v + t, acc, rounding)
            ok = lo == hi
            res = lo
        # NaN entries fail ok and are settled (as NaN) by the exact path below
    n_exact = 0 if ok.all() else _settle_uncertain(v, t, ok, res, a_t, b_t, c, la_t, lb_t, acc, rounding)
    return res, n_exact


def _settle_uncertain(v, t, ok, res, a_t, b_t, c, la_t, lb_t, acc: Format, rounding: str) -> int:
    """The entries of :func:`_tile_exact_plus` certificate (1) left open
    (``~ok``): certificate (2) on the grid of the inputs' lowest set bits, then
    :func:`_certify_rows`, then exact summation.  Writes them into ``res``;
    returns the number summed exactly."""
    n_exact = 0
    bad = np.unravel_index(np.flatnonzero(~ok), v.shape)
    *bidx, ii, jj = bad
    bidx = tuple(bidx)
    a_b = np.broadcast_to(a_t, v.shape[:-2] + a_t.shape[-2:])
    b_b = np.broadcast_to(b_t, v.shape[:-2] + b_t.shape[-2:])
    cb = np.broadcast_to(c, v.shape)
    # certificate (2), cheap: the exact c + S is a multiple of
    # q = 2**min(min_k lsb(a_ik) + lsb(b_kj), lsb(c_ij)); with B < q/2 it is rint(v/q) q.
    if la_t is None:
        la_t = _lsb_exp(np.ascontiguousarray(a_t)).astype(np.int16)
    if lb_t is None:
        lb_t = _lsb_exp(np.ascontiguousarray(b_t)).astype(np.int16)
    # contiguous rows (A) and transposed columns (B) so the gathers read rows
    la_t = np.broadcast_to(np.ascontiguousarray(la_t), a_b.shape)
    lb_t = np.broadcast_to(np.ascontiguousarray(np.swapaxes(lb_t, -1, -2)), b_b.shape[:-2] + b_b.shape[:-3:-1])
    la = la_t[bidx + (ii,)]  # (nbad, kt) int16: sums stay within +-8192
    lb = lb_t[bidx + (jj,)]
    la += lb
    qe = np.minimum(np.min(la, axis=1).astype(np.int64), _lsb_exp(cb[bad].astype(np.float64)))
    qe = np.clip(qe, -1074, 1023)
    q = np.ldexp(1.0, qe.astype(np.int32))
    vb, tb = v[bad], t[bad]
    with np.errstate(over="ignore", invalid="ignore"):
        grid = (tb < q / 2) & (np.abs(vb) < np.ldexp(q, 52)) & np.isfinite(vb)
        ve = np.rint(vb / q) * q
    fixed = np.where(grid, _rnd(ve, acc, rounding), np.asarray(res[bad], dtype=np.float64))
    if not grid.all():
        sel = np.nonzero(~grid)[0]
        sub = tuple(ix[sel] for ix in bad)
        *sbidx, sii, sjj = sub
        sbidx = tuple(sbidx)
        rows = a_b[sbidx + (sii,)]  # (nsel, kt)
        cols = np.swapaxes(b_b, -1, -2)[sbidx + (sjj,)]
        terms = np.concatenate([rows * cols, cb[sub].astype(np.float64)[:, None]], axis=1)
        fx, still = _certify_rows(terms, acc, rounding)
        for r in np.nonzero(still)[0]:  # rare: exact summation in Python
            fx[r] = exact_dot_round(terms[r], acc, rounding)
        n_exact = int(still.sum())
        fixed[sel] = fx
    res[bad] = fixed
    return n_exact


_EXACT_LIM = 2.0**52  # ra_i rb_j <= 2^52 (three roundings of 2^-53 to spare) => exact sums


def _exact_tile_factors(a_t: np.ndarray, b_t: np.ndarray, la_t: np.ndarray, lb_t: np.ndarray):
    """Per-row ``ra`` and per-column ``rb`` (also the smallest summed lowest-set-bit
    exponent and the row/column maxima ``max|a_i.|``, ``max|b_.j|``) with: ``ra_i rb_j <= 2^52`` => every
    partial sum of ``a_t[i, k] b_t[k, j]`` (any order, with or without FMA) is exact
    in float64.

    Every product ``a_ik b_kj`` is a multiple of ``2^q`` with
    ``q = min_k lsb(a_ik) + min_k lsb(b_kj)``, and every partial sum is bounded by
    ``sum_k |a_ik| max_k|b_kj|``; if that bound is below ``2^(q+53)`` each partial
    sum is an integer multiple of ``2^q`` of at most 53 bits, hence representable.
    ``ra_i = sum|a_i.| 2^-min lsb(a_i.)``, ``rb_j = max|b_.j| 2^-min lsb(b_.j)``;
    the float64 sum of ``kt`` terms and the product ``fl(ra_i rb_j)`` move the
    bound by less than a factor ``(1 + 2^-53)^2 (1 + kt 2^-53)`` (the power-of-two
    scalings are exact), so ``fl(ra_i rb_j) <= 2^52`` implies the exact bound is
    below ``2^53``.  NaN/inf rows or columns give NaN/inf factors (never certified).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        abs_a = np.abs(a_t)  # once for the maximum and the sum
        amax = np.max(abs_a, axis=-1)
        bmax = np.max(np.abs(b_t), axis=-2)
        la = np.min(la_t, axis=-1).astype(np.int32)  # sentinel 4096: zero row
        lb = np.min(lb_t, axis=-2).astype(np.int32)
        ra = np.ldexp(np.sum(abs_a, axis=-1), -la)
        rb = np.ldexp(bmax, -lb)
    return ra, rb, int(la.min(initial=4096)) + int(lb.min(initial=4096)), amax, bmax


def _tile_certified_exact(c, a_t, b_t, la_t, lb_t, acc: Format, rounding: str, work: dict,
                          out32: np.ndarray | None, max_fail_share: float = 0.125):
    """``fl_acc(c + a_t @ b_t)`` with one rounding per entry, for 2-D operands, when
    most of the tile's float64 sums are certified exact by :func:`_exact_tile_factors`.

    ``work`` holds reusable scratch arrays: ``"s"`` (M, N) float64, ``"v"`` (a row
    chunk of 65536 float64 values), ``"flag"`` (M, N) bool.  Returns ``(result, n_exact)``, or ``None`` (the caller then uses
    :func:`_tile_exact_plus`) when more than ``max_fail_share`` of the entries
    are not certified, or, for fp32/rne, when a sum may land in fp32's subnormal
    range on a grid finer than ``2^-149``.

    After the one BLAS call the certified sums ``S`` are exact; then

    * fp32 / rne, ``c`` a zero scalar (first tile, split-K partials): ``RN32(S)``;
    * fp32 / rne: ``v = fl64(c + S)`` and ``RN32(v) = RN32(c + S)`` unless ``v``
      is an fp32 midpoint (its low 29 significand bits are ``1 << 28``) reached
      by rounding; those entries get TwoSum's error term and move one fp32 step
      toward it.  The grid condition ``min lsb >= -149`` makes any sum below
      ``2^-126`` exact, so the midpoint test (made for normal fp32 binades)
      covers every case;
    * other formats or modes: :func:`round_sum2` (TwoSum + round-to-odd).

    Entries that are not certified exact (a row and a column that both hold
    values with low set bits far below their maxima) are settled by
    certificate (1) of :func:`_tile_exact_plus` on the gathered entries: with
    ``v = fl(c + S_hat)`` and ``T = (gamma_kt (1 + 2^-50) + 2^-51) kt max|a_i.|
    max|b_.j| + 2^-51 |c_ij|``, both ends of ``[v - T, v + T]`` round alike;
    the few that do not go to :func:`_certify_rows` (tight bound, grid
    certificate, exact summation).
    """
    buf = work["s"]
    if buf.size == 0:
        return None
    ra, rb, qmin, amax, bmax = _exact_tile_factors(a_t, b_t, la_t, lb_t)
    lim = _EXACT_LIM
    with np.errstate(invalid="ignore", over="ignore"):
        rbmax, ramax = np.max(rb), np.max(ra)
        rows = np.flatnonzero(~(ra * rbmax <= lim))
        cols = np.flatnonzero(~(rb * ramax <= lim))
    max_fail = int(max_fail_share * buf.size)
    fail_i = fail_j = np.zeros(0, np.intp)
    if rows.size and cols.size:
        if rows.size * cols.size > 8 * max_fail:
            return None
        with np.errstate(invalid="ignore", over="ignore"):
            fi, fj = np.nonzero(~(np.multiply.outer(ra[rows], rb[cols]) <= lim))
        if fi.size > max_fail:
            return None
        fail_i, fail_j = rows[fi], cols[fj]
    fast32 = acc == FP32 and rounding == "rne"
    if fast32 and qmin < -149:
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN entries: IEEE, settled below
        np.matmul(a_t, b_t, out=buf)  # the one BLAS call: exact where certified
    cb = np.broadcast_to(c, buf.shape)
    if fast32 and np.ndim(c) == 0 and c == 0:
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(out32, buf, casting="same_kind")  # c = 0: RN32(S) of the exact S
        res = out32
    elif fast32:
        # over row chunks that stay in cache after the BLAS call: v = fl64(c + S),
        # RN32(v) (overflow -> inf), and the fp32-midpoint bit test on v
        flag = work["flag"]
        nr, nc = buf.shape
        # one compiled pass when numba is there (numlab.kernels._accel; same bits)
        done = buf.size >= _ACCEL_MIN_ENTRIES and _accel.add_round32(buf, c, out32, flag) is not None
        rc = max(1, 65536 // max(nc, 1))
        v64 = work["v"][:min(rc, nr)]
        bits = v64.view(np.uint64)
        with np.errstate(over="ignore", invalid="ignore"):
            for r0 in range(0, 0 if done else nr, rc):
                r1 = min(r0 + rc, nr)
                vv, bb = v64[:r1 - r0], bits[:r1 - r0]
                np.add(buf[r0:r1], cb[r0:r1], out=vv)
                np.copyto(out32[r0:r1], vv, casting="same_kind")
                np.bitwise_and(bb, np.uint64(0x1FFFFFFF), out=bb)
                np.equal(bb, np.uint64(0x10000000), out=flag[r0:r1])
        if flag.any():
            idx = np.flatnonzero(flag)
            ii, jj = np.divmod(idx, nc)
            co = cb[ii, jj].astype(np.float64)
            flat32 = out32.reshape(-1)
            with np.errstate(over="ignore", invalid="ignore"):
                v, e = _two_sum(co, buf.reshape(-1)[idx])  # exact error of v = fl64(c + S)
                r = flat32[idx]
                r = np.where((e > 0) & (r < v), np.nextafter(r, np.float32(np.inf)), r)
                r = np.where((e < 0) & (r > v), np.nextafter(r, np.float32(-np.inf)), r)
            flat32[idx] = r
        res = out32
    else:
        res = round_sum2(np.asarray(cb, dtype=np.float64), buf, acc, rounding)
    n_exact = 0
    if fail_i.size:
        n_exact = _settle_failed(res, buf, cb, a_t, b_t, fail_i, fail_j, amax, bmax, acc, rounding)
    return res, n_exact


def _settle_failed(res, buf, cb, a_t, b_t, fail_i, fail_j, amax, bmax, acc: Format, rounding: str) -> int:
    """The entries ``(fail_i, fail_j)`` of :func:`_tile_certified_exact` whose
    float64 sums were not certified exact: certificate (1) of
    :func:`_tile_exact_plus`, then :func:`_certify_rows`, then exact
    summation.  Writes them into ``res``; returns the number summed exactly."""
    kt = a_t.shape[-1]
    n_exact = 0
    fflat = fail_i * buf.shape[1] + fail_j
    cf = cb[fail_i, fail_j].astype(np.float64)
    g = gamma(kt, 2.0**-53)
    with np.errstate(over="ignore", invalid="ignore"):
        v = cf + buf.reshape(-1)[fflat]
        t = (g * (1 + 2.0**-50) + 2.0**-51) * kt * amax[fail_i] * bmax[fail_j] + 2.0**-51 * np.abs(cf)
        lo, hi = _rnd(v - t, acc, rounding), _rnd(v + t, acc, rounding)
    fixed = lo  # certificate (1); NaN bounds fail it and are settled below
    bad = np.flatnonzero(~(lo == hi))
    if bad.size:
        bi, bj = fail_i[bad], fail_j[bad]
        terms = np.concatenate([a_t[bi] * b_t[:, bj].T, cf[bad][:, None]], axis=1)
        fx, still = _certify_rows(terms, acc, rounding)
        for r_ in np.nonzero(still)[0]:  # rare: exact summation in Python
            fx[r_] = exact_dot_round(terms[r_], acc, rounding)
        n_exact = int(still.sum())
        fixed[bad] = fx
    res.reshape(-1)[fflat] = fixed  # res is C-contiguous (M, N): a view
    return n_exact


def _certify_rows(terms: np.ndarray, acc: Format, rounding: str):
    """Round ``terms.sum(axis=1)`` (exact float64 terms) once to ``acc`` where a
    per-row certificate holds; returns (values, uncertified mask).

    With the tight bound ``B = gamma_n sum|t|`` (+ the rounding of ``v``):
    (1) both ends of ``[v - B, v + B]`` round alike, or (2) the exact sum is a
    multiple of ``q = 2**min lsb(t)`` (the lowest set bit over the row's
    terms) and ``B < q/2``, so it equals ``rint(v/q) q`` exactly.
    """
    n = terms.shape[1]
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.sum(terms, axis=1)
        g = gamma(n, 2.0**-53)
        # sum|t| computed in float64 may be low by a factor (1 - gamma_n): inflate by 1 + 2 gamma_n
        bound = g * (1 + 2 * g + 2.0**-50) * np.sum(np.abs(terms), axis=1) + np.abs(v) * 2.0**-51 + 2.0**-1000
        lo = _rnd(v - bound, acc, rounding)
        hi = _rnd(v + bound, acc, rounding)
        ok = (lo == hi) | np.isinf(v)
        out = np.where(np.isfinite(v), lo, _rnd(v, acc, rounding))
        grid = np.zeros_like(ok)
        rest = np.nonzero(~ok & np.isfinite(v))[0]
        if rest.size:
            qe = np.clip(np.min(_lsb_exp(terms[rest]), axis=1), -1074, 1023)
            q = np.ldexp(1.0, qe.astype(np.int32))
            vr, br = v[rest], bound[rest]
            g2 = (br < q / 2) & (np.abs(vr) < np.ldexp(q, 52))
            ve = np.rint(vr / q) * q
            out[rest] = np.where(g2, _rnd(ve, acc, rounding), out[rest])
            grid[rest] = g2
    return out, ~(ok | grid)


def matmul(
    a,
    b,
    *,
    k_tile: int,
    acc="fp32",
    out=None,
    algo: str = "sequential",
    fma: bool = False,
    split_order="pairwise",
    acc_rounding: str = "rne",
    out_rounding: str = "rne",
    stats: dict | None = None,
):
    """K-tiled ``a @ b`` with accumulator ``acc`` (see module docstring for the algorithms).

    Parameters
    ----------
    a, b : array_like
        (..., M, K) and (K, N) or (..., K, N) float containers.
    k_tile : int
        K-tile length (> 0).
    acc : Format or str
        Accumulator format (fp32 default).
    out : Format or str, optional
        Result format (default ``acc``), rounded once from the accumulator.
    algo : {"sequential", "block_fma", "split_k"}
    fma : bool
        ``sequential`` only: one rounding per multiply-add instead of two.
    split_order : Order or str
        ``split_k`` only: order of the reduction of the tile partials.
    stats : dict, optional
        If given, ``stats["uncertified"]`` receives the number of entries that
        needed the exact fallback (block_fma / split_k).

    Returns
    -------
    ndarray in ``out.container``.
    """
    check_choice("algo", algo, MATMUL_ALGOS)
    if not isinstance(k_tile, int | np.integer) or isinstance(k_tile, bool) or k_tile <= 0:
        raise ValueError(f"k_tile={k_tile!r} is not valid; it must be an int > 0")
    acc = get_format(acc, "acc")
    outf = acc if out is None else get_format(out, "out")
    A0, B0 = _check_operands(a, b)
    K = A0.shape[-1]
    shape = np.broadcast_shapes(A0.shape[:-2], B0.shape[:-2]) + (A0.shape[-2], B0.shape[-1])
    if K == 0 or 0 in shape:  # empty sums are +0; nothing to round
        if stats is not None:
            stats["uncertified"] = 0
        return np.zeros(shape, dtype=outf.container)
    kt = int(k_tile)
    tiles = [(s, min(s + kt, K)) for s in range(0, K, kt)]
    unc = 0
    if algo == "sequential":
        C = _sequential(A0, B0, shape, tiles, acc, acc_rounding, fma)
    elif acc == FP64 or acc.p > 51:
        # fp64 accumulation: BLAS per tile, its internal order is not specified
        A, B = A0.astype(np.float64), B0.astype(np.float64)
        C = np.full(shape, -0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            for s, e in tiles:
                C = C + A[..., :, s:e] @ B[..., s:e, :]
    else:
        C, unc = _tiled(a, b, A0, B0, shape, tiles, algo, acc, acc_rounding, split_order)
    if stats is not None:
        stats["uncertified"] = unc
    res = C if (outf == acc and out_rounding == "rne") else round_to(C, outf, out_rounding)
    return to_container(np.asarray(res), outf)


def _check_operands(a, b):
    """``a`` and ``b`` as float32/float64 value arrays; ValueError when they are
    not at least 2-D, their inner dimensions differ or they hold values wider
    than fp32."""
    A0 = as_values(a, "a")
    B0 = as_values(b, "b")
    if A0.ndim < 2 or B0.ndim < 2:
        raise ValueError(f"a and b must be at least 2-D, got shapes {A0.shape} and {B0.shape}")
    if B0.shape[-2] != A0.shape[-1]:
        raise ValueError(f"inner dimensions differ: a is {A0.shape}, b is {B0.shape}")
    for name, M in (("a", A0), ("b", B0)):
        if M.dtype == np.float32:
            continue  # float32 (or a narrower widened container): <= 24 bits by construction
        with np.errstate(over="ignore"):
            if not np.array_equal(M.astype(np.float32), M, equal_nan=True):
                raise ValueError(
                    f"{name} holds values with more than 24 significant bits (or beyond fp32's "
                    "range); matmul models fp32-and-narrower inputs only (round them first)"
                )
    return A0, B0


def _sequential(A0, B0, shape, tiles, acc: Format, acc_rounding: str, fma: bool) -> np.ndarray:
    """``algo="sequential"``: per K tile a fresh accumulator of rounded
    products (or FMAs), added into C; float64 values of ``acc``."""
    A, B = A0.astype(np.float64), B0.astype(np.float64)
    ar = Arith(acc, acc_rounding)
    C = np.full(shape, -0.0, dtype=ar.dtype)
    for s, e in tiles:
        t = np.full(shape, -0.0, dtype=ar.dtype)
        for k in range(s, e):
            p = A[..., :, k, None] * B[..., None, k, :]  # exact in float64
            if fma:
                t = ar.round(round_sum2(t.astype(np.float64), p, acc, acc_rounding))
            else:
                t = ar.add(t, ar.round(p))
        C = ar.add(C, t)
    return C.astype(np.float64)


def _tiled(a, b, A0, B0, shape, tiles, algo, acc: Format, acc_rounding: str, split_order):
    """``block_fma`` and ``split_k``: each K tile's exact sum rounded once
    (certified, module docstring).  Returns (C, number of exactly summed
    entries)."""
    A, B = A0, B0
    K = A0.shape[-1]
    unc = 0
    LA, LB = _lsb_of_input(np.asarray(a), A0), _lsb_of_input(np.asarray(b), B0)  # once for all tiles
    flat = B.ndim == 2  # (..., M, K) @ (K, N): one 2-D problem of M' = prod(...) M rows
    if flat:
        A2, LA2 = A.reshape(-1, K), LA.reshape(-1, K)
        mn = (A2.shape[0], B.shape[-1])
        work = {"s": np.empty(mn), "v": np.empty((max(1, 65536 // max(mn[1], 1)), mn[1])),
                "flag": np.empty(mn, bool)}
        c32 = [np.empty(mn, np.float32) for _ in range(2)] if acc == FP32 and acc_rounding == "rne" else None

    def tile(c, s, e, parity):
        """fl_acc(c + A[:, s:e] @ B[s:e]) with one rounding: certified-exact float64
        sums when the cheap certificate holds, else the interval certificates."""
        if flat:
            a_t = np.ascontiguousarray(A2[:, s:e], dtype=np.float64)
            c2 = c.reshape(mn) if np.ndim(c) else c
            got = _tile_certified_exact(c2, a_t, np.ascontiguousarray(B[s:e], dtype=np.float64), LA2[:, s:e], LB[s:e], acc, acc_rounding, work,
                                        None if c32 is None else c32[parity])
            if got is not None:
                return got[0].reshape(shape), got[1]
        if not np.ndim(c):
            c = np.full(shape, c)
        return _tile_exact_plus(c, np.ascontiguousarray(A[..., :, s:e], dtype=np.float64),
                                np.ascontiguousarray(B[..., s:e, :], dtype=np.float64), acc, acc_rounding,
                                LA[..., :, s:e], LB[..., s:e, :])

    if algo == "block_fma":
        C = np.float64(-0.0)  # a zero scalar: the first tile is one rounding of its exact sum
        for t_i, (s, e) in enumerate(tiles):
            C, n_bad = tile(C, s, e, t_i % 2)
            unc += n_bad
        # C: float32 (fp32 fast path) or float64, values of acc
    else:
        order = as_order(split_order, "split_order")
        parts = []
        for s, e in tiles:
            P, n_bad = tile(np.float64(-0.0), s, e, 0)
            unc += n_bad
            parts.append(P.astype(np.float64))
        ar = Arith(acc, acc_rounding)
        stack = ar.round(np.stack(parts, axis=-1))
        C = order._sum(stack, ar).astype(np.float64) if parts else np.zeros(shape)
    return C, unc
