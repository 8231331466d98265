"""Optional compiled path of :func:`numlab.kernels.mma.mma` (numba).

The same algorithm as the numpy path of :mod:`numlab.kernels.mma`, step for
step, for units with ``interleave == 1`` and ``carry_bits is None``: per row
``i`` and per K block, the anchor exponent of every column is the largest
nominal exponent ``e_a + e_b`` of a nonzero product or the exponent of C
(the exponents are read once per operand from the float64 exponent field,
``ea``/``eb``, as float32 so that the anchor loops run on eight lanes); each
term is scaled by ``2**(23 + align_bits - anchor)`` (exact; the scale is built
from its exponent bits), rounded to an integer by the alignment rounding
(truncation = the int64 conversion, one instruction) and added as int64
(exact, and the module docstring of ``mma`` bounds the sum below ``2**53``,
so the order of the additions does not change a bit); the block result is
the sum scaled back (exact) and rounded to the result format by scaling to its
quantum and applying ``trunc``/``rint``/``floor``/``ceil``, or for truncation
by clearing the float64 bits below the quantum (every step exact, as in
``numlab.rounding``'s generic and bit paths).  When the anchors of a row's
block (over a column tile) rule out subnormal and overflowing results,
truncation clears a fixed number of bits (``_finish_plain``).

Layout: B and its exponents are packed into column tiles of ``_TJ``
(``_prep_b``); the output is cut into tiles of ``_TI`` rows by ``_TJ`` columns;
for each tile the K blocks run in order, and within a block every row of the
tile reads the same ``block x _TJ`` slice of B (and of its exponents) from the
L1 cache.  The loops over the columns of a tile are written so that LLVM
vectorises them; the products of a block are taken four K indices at a time
(zero entries of A skipped), so a column's partial sum is loaded and stored
once per four products.  Row chunks run in Python threads (the compiled
function releases the GIL); each output element is computed by one thread in
the same order, so the bits do not depend on the number of threads.

tests/test_mma_model.py checks this path bit for bit against the numpy path
and against the exact scalar transcription of the MATLAB model.  Imported
only when numba is installed (it is optional).  Compiled functions are cached
on disk (``cache=True``: ``__pycache__`` next to this file, or
``NUMBA_CACHE_DIR``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

_ABSENT = -600
"""Exponent standing for a zero input and anchor of a column with no nonzero
term: below every real anchor (>= -252: bf16/tf32 exponents are clamped at
-126) even when added to a real exponent (<= 127), and such that the scale
``2**(width - anchor)`` needs no clamp: anchors lie in [-600, 1024] (1024: an
infinite C), so ``width - anchor`` (width in [3, 47]) is a normal float64
exponent."""

_BIG = np.int64(1 << 60)
"""The aligned C term standing for an infinite C: far above any block sum,
so that scaled back it overflows to inf (no window of a unit is 60 bits wide)."""

_ALIGN = {"rtz": 0, "down": 1, "rne": 2, "sticky": 3}
_FINAL = {"rtz": 0, "down": 1, "rne": 2, "up": 3}

_TI = 16
"""Rows per tile: they share the block's slice of B in L1."""
_TJ = 128
"""Columns per tile (the vectorised inner loops run over them)."""


@numba.njit(inline="always")
def _len_bits(n):
    """The bit length of n >= 0."""
    b = 0
    while n > 0:
        n >>= 1
        b += 1
    return b


@numba.njit(inline="always")
def _pow2(e):
    """The bits of 2.0**e for -1022 <= e <= 1023."""
    return np.int64((e + 1023) << 52)


@numba.njit(inline="always")
def _exponent(bits):
    return ((bits >> 52) & 0x7FF) - 1023


@numba.njit(inline="always")
def _as_float(bits):
    return np.int64(bits).view(np.float64)


@numba.njit(inline="always")
def _as_bits(x):
    return np.float64(x).view(np.int64)


@numba.njit(inline="always")
def _align(t, code):
    """The term ``t`` (window units, finite, below 2**62) rounded to an
    integer (int64) by the alignment rounding ``code``; sticky: twice the
    truncation plus the OR of the lost bits, with the term's sign.  The
    int64 conversion truncates (one instruction, where ``trunc`` is two)."""
    if code == 0:
        return np.int64(t)
    if code == 1:
        return np.int64(np.floor(t))
    if code == 2:
        return np.int64(np.rint(t))
    r = np.int64(t)
    return 2 * r + np.int64(t != np.float64(r)) * np.int64(np.sign(t))


@numba.njit(inline="always")
def _rounded(v, p, emin, big, tiny, flush, code):
    """v (exact float64) rounded to (p, emin, emax) by ``code`` (0 rtz,
    1 down, 2 rne, 3 up); +-inf from 2**(emax+1) = ``big``; flushed below
    ``tiny`` when ``flush``."""
    vb = _as_bits(v)
    if code == 0:
        # clear the float64 significand bits below the quantum
        # 2**(max(e, emin) - p + 1): 53 - p of them for a normal result;
        # below the smallest subnormal (k > 52) everything but the sign
        k = 53 - p + max(emin - _exponent(vb), 0)
        k = k if k <= 52 else 63
        r = _as_float(vb & (np.int64(-1) << k))
    else:
        e = max(_exponent(vb), emin)
        x = v * _as_float(_pow2(p - 1 - e))
        if code == 1:
            x = np.floor(x)
        elif code == 2:
            x = np.rint(x)
        else:
            x = np.ceil(x)
        r = x * _as_float(_pow2(e - p + 1))
    r = r * np.inf if abs(r) >= big else r
    return 0.0 * v if flush and abs(r) < tiny else r


@numba.njit(inline="always")
def _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s, width, acode):
    """Anchors, scales and the exact aligned sum ``s`` of one block of row
    ``i`` (row ``ii`` of the output tile ``ot``, column tile ``t``): C =
    ``ot[ii]`` plus the products of the A entries ``a[i, ks[:4 ng]]`` (the
    nonzero ones, padded with the all-zero index)."""
    # anchors: C's exponent (clamped at fp32's emin) and e_a + e_b
    k0, k1, k2, k3 = ks[0], ks[1], ks[2], ks[3]
    x0, x1, x2, x3 = ea[i, k0], ea[i, k1], ea[i, k2], ea[i, k3]
    for jj in range(_TJ):
        v = ot[ii, jj]
        e = np.float32(max(_exponent(_as_bits(v)), -126))
        e = e if v != 0.0 else np.float32(_ABSENT)
        anc[jj] = max(e, max(max(x0 + ebp[t, k0, jj], x1 + ebp[t, k1, jj]),
                             max(x2 + ebp[t, k2, jj], x3 + ebp[t, k3, jj])))
    for g in range(1, ng):
        k0, k1, k2, k3 = ks[4 * g], ks[4 * g + 1], ks[4 * g + 2], ks[4 * g + 3]
        x0, x1, x2, x3 = ea[i, k0], ea[i, k1], ea[i, k2], ea[i, k3]
        for jj in range(_TJ):
            anc[jj] = max(anc[jj], max(max(x0 + ebp[t, k0, jj], x1 + ebp[t, k1, jj]),
                                       max(x2 + ebp[t, k2, jj], x3 + ebp[t, k3, jj])))
    # scales 2**(width - anchor), the C term and the products, each rounded
    # to an integer; the sum is exact, so its order does not matter
    k0, k1, k2, k3 = ks[0], ks[1], ks[2], ks[3]
    y0, y1, y2, y3 = a[i, k0], a[i, k1], a[i, k2], a[i, k3]
    lo = np.int64(1 << 20)
    hi = np.int64(-(1 << 20))
    for jj in range(_TJ):
        e = np.int64(anc[jj])
        lo = min(lo, e)
        hi = max(hi, e)
        f = _as_float(_pow2(width - e))
        sc[jj] = f
        d = ot[ii, jj]
        # C; an infinite C (an earlier overflow) stays infinite (see _finish)
        cterm = _align(d * f, acode) if abs(d) < np.inf else (_BIG if d > 0 else -_BIG)
        s[jj] = cterm + (
            (_align(y0 * bp[t, k0, jj] * f, acode) + _align(y1 * bp[t, k1, jj] * f, acode))
            + (_align(y2 * bp[t, k2, jj] * f, acode) + _align(y3 * bp[t, k3, jj] * f, acode)))
    for g in range(1, ng):
        k0, k1, k2, k3 = ks[4 * g], ks[4 * g + 1], ks[4 * g + 2], ks[4 * g + 3]
        y0, y1, y2, y3 = a[i, k0], a[i, k1], a[i, k2], a[i, k3]
        for jj in range(_TJ):
            f = sc[jj]
            s[jj] += ((_align(y0 * bp[t, k0, jj] * f, acode)
                       + _align(y1 * bp[t, k1, jj] * f, acode))
                      + (_align(y2 * bp[t, k2, jj] * f, acode)
                         + _align(y3 * bp[t, k3, jj] * f, acode)))
    return lo, hi


@numba.njit(inline="always")
def _finish_plain(ot, ii, sc, s, inv, mask):
    """_finish for truncation when no result of the row's block can be
    subnormal or overflow (checked by the caller from the anchors):
    truncation to the format is then clearing the float64 bits below it."""
    for jj in range(_TJ):
        v = np.float64(s[jj]) * _as_float(inv - _as_bits(sc[jj]))
        ot[ii, jj] = _as_float(_as_bits(v) & mask)


@numba.njit(inline="always")
def _finish(ot, ii, sc, s, inv, p, emin, big, tiny, flush, fcode):
    """ot[ii, jj] <- the block result: the exact sum ``s`` (int64, window
    units) scaled back by ``1 / sc`` (its exponent field negated: ``inv`` is
    that of 2**0 twice, or of 2**-1 too for the sticky half units) and
    rounded.  A column without any nonzero term has s = 0, hence +0; an
    infinite C (an earlier overflow) made s about 2**60, hence inf again."""
    for jj in range(_TJ):
        v = np.float64(s[jj]) * _as_float(inv - _as_bits(sc[jj]))
        ot[ii, jj] = _rounded(v, p, emin, big, tiny, flush, fcode)


@numba.njit(cache=True, nogil=True)
def run(a, bp, ea, ebp, c, blk, width, acode, fcode, p, emin, emax, flush, promote, out16):
    """D for the whole matrix (see the module docstring).  ``a`` (M, K + 1)
    and ``ea`` end with an all-zero column (exponent ``_ABSENT``); ``bp``
    and ``ebp`` (tiles, K + 1, _TJ) are B and its exponents cut into column
    tiles, zero-padded.  ``acode``/``fcode`` select the alignment and final
    roundings; the branches sit outside the vectorised loops."""
    M, N = c.shape
    Kp = a.shape[1] - 1
    zero = Kp
    out = np.empty((M, N))
    big = 2.0 ** (emax + 1)
    tiny = 2.0 ** emin
    # bits of 2**0 doubled (2**-1 for the sticky bit's half units)
    inv = np.int64((2045 if acode == 3 else 2046) << 52)
    # a nonzero block sum is at least 2**(anchor - width - 1) (sticky: half
    # units) and below (blk + 1) 2**(anchor + 3) (terms below 2**(anchor + 2),
    # sticky doubling), so with every anchor of a row in [lo_plain, hi_plain]
    # no result is subnormal or reaches 2**(emax + 1)
    lo_plain = emin + width + 1
    hi_plain = emax + 1 - 3 - _len_bits(blk + 1)
    mask = np.int64(-1) << (53 - p)
    anc = np.empty(_TJ, np.float32)
    sc = np.empty(_TJ)
    s = np.empty(_TJ, np.int64)
    ot = np.empty((_TI, _TJ))
    acc = np.empty((_TI, _TJ))
    ks = np.empty(blk + 4, np.int64)
    for i0 in range(0, M, _TI):
        ni = min(M - i0, _TI)
        for t in range(bp.shape[0]):
            j0 = t * _TJ
            nj = min(N - j0, _TJ)
            ot[:, :] = 0.0
            ot[:ni, :nj] = c[i0:i0 + ni, j0:j0 + nj]
            if promote > 0:
                acc[:, :] = ot
                ot[:, :] = 0.0
            for k0 in range(0, Kp, blk):
                for ii in range(ni):
                    i = i0 + ii
                    nk = 0
                    for k in range(k0, k0 + blk):
                        if a[i, k] != 0.0:
                            ks[nk] = k
                            nk += 1
                    ng = max(1, (nk + 3) // 4)
                    for k in range(nk, 4 * ng):
                        ks[k] = zero
                    if acode == 0:
                        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s,
                                        width, 0)
                    elif acode == 1:
                        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s,
                                        width, 1)
                    elif acode == 2:
                        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s,
                                        width, 2)
                    else:
                        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s,
                                        width, 3)
                    if fcode == 0 and lo >= lo_plain and hi <= hi_plain:
                        _finish_plain(ot, ii, sc, s, inv, mask)
                    elif fcode == 0:
                        _finish(ot, ii, sc, s, inv, p, emin, big, tiny, flush, 0)
                    elif fcode == 1:
                        _finish(ot, ii, sc, s, inv, p, emin, big, tiny, flush, 1)
                    elif fcode == 2:
                        _finish(ot, ii, sc, s, inv, p, emin, big, tiny, flush, 2)
                    else:
                        _finish(ot, ii, sc, s, inv, p, emin, big, tiny, flush, 3)
                    if promote > 0 and (k0 + blk) % promote == 0:
                        for jj in range(_TJ):
                            acc[ii, jj] = np.float64(np.float32(acc[ii, jj])
                                                     + np.float32(ot[ii, jj]))
                            ot[ii, jj] = 0.0
            if promote > 0:
                for ii in range(ni):
                    for jj in range(_TJ):
                        v = np.float64(np.float32(acc[ii, jj]) + np.float32(ot[ii, jj]))
                        ot[ii, jj] = (_rounded(v, 11, -14, 65536.0, 0.0, False, 2)
                                      if out16 else v)
            out[i0:i0 + ni, j0:j0 + nj] = ot[:ni, :nj]
    return out


@numba.njit(inline="always")
def _exp_of(v, emin):
    """``max(floor(log2|v|), emin)`` of a nonzero float64 value of an input
    format (all of them normal float64 numbers) from its exponent field, as
    float32; ``_ABSENT`` for zero (a product with a zero factor never sets
    the anchor)."""
    e = np.float32(max(_exponent(_as_bits(v)), emin))
    return e if v != 0.0 else np.float32(_ABSENT)


@numba.njit(cache=True, nogil=True)
def _prep_a(a, emin):
    """A (M, K) with an all-zero column appended and its exponents (float32,
    ``_ABSENT`` in that column), in one pass."""
    M, K = a.shape
    ap = np.zeros((M, K + 1))
    ea = np.empty((M, K + 1), np.float32)
    for i in range(M):
        for k in range(K):
            v = a[i, k]
            ap[i, k] = v
            ea[i, k] = _exp_of(v, emin)
        ea[i, K] = _ABSENT
    return ap, ea


@numba.njit(cache=True, nogil=True)
def _prep_b(b, emin):
    """B (K, N) with a zero row appended, cut into column tiles of ``_TJ``
    (zero-padded): shape (tiles, K + 1, _TJ), and its exponents likewise
    (float32, ``_ABSENT`` for the zeros), in one pass."""
    K, N = b.shape
    nt = (N + _TJ - 1) // _TJ
    bp = np.zeros((nt, K + 1, _TJ))
    ebp = np.full((nt, K + 1, _TJ), np.float32(_ABSENT))
    for k in range(K):
        for j in range(N):
            v = b[k, j]
            bp[j // _TJ, k, j % _TJ] = v
            ebp[j // _TJ, k, j % _TJ] = _exp_of(v, emin)
    return bp, ebp


def mma_numba(a, b, emin, c, unit, fmt) -> np.ndarray:
    """D = A B + C by :func:`run` with a unit's parameters (``a``, ``b``:
    float64 values of the input format, finite, K padded to the block;
    ``emin``: the input format's; ``c`` finite) on row chunks in threads
    (``run`` releases the GIL; rows are independent, so the bits do not
    depend on the number of threads)."""
    M = a.shape[0]
    a, ea = _prep_a(a, emin)
    bp, ebp = _prep_b(b, emin)
    args = (unit.block, 23 + unit.align_bits, _ALIGN[unit.align_rounding],
            _FINAL[unit.final_rounding], fmt.p, fmt.emin, fmt.emax,
            not unit.subnormals, unit.promote_every or 0, unit.out_fmt == "fp16")
    nthreads = min(len(os.sched_getaffinity(0)), max(1, M // (4 * _TI)))
    if nthreads <= 1:
        return run(a, bp, ea, ebp, c, *args)
    step = -(-M // nthreads // _TI) * _TI
    parts = [(r, min(M, r + step)) for r in range(0, M, step)]
    with ThreadPoolExecutor(len(parts)) as pool:
        outs = list(pool.map(lambda rr: run(a[rr[0]:rr[1]], bp, ea[rr[0]:rr[1]], ebp,
                                            c[rr[0]:rr[1]], *args), parts))
    return np.concatenate(outs, axis=0)
