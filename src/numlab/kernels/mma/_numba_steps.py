"""The compiled steps of the matrix-unit model's numba path (:mod:`._numba`).

Constants of the layout (tiles ``_TI`` x ``_TJ``, the exponent ``_ABSENT`` of
a zero, the rounding codes), the bit helpers and the steps a row's K block
goes through: the general path (:func:`_general`, any block length and
rounding) and the end of the fast path (:func:`_fast_finish`).  They sit
below both the generated drivers (:mod:`._numba_blocks`, which inline them)
and the Python driver (:mod:`._numba`, which calls the generated ones), so
neither imports the other's importer.  See :mod:`._numba` for the algorithm.
"""

from __future__ import annotations

import numba
import numpy as np

_ABSENT = -600
"""Exponent standing for a zero input and anchor of a column with no nonzero
term: below every real anchor (>= -252 with bf16/tf32 exponents clamped at
-126; >= -272 with ``subnormal_anchor="true"``, tf32's smallest value being
2**-136) even when added to a real exponent (<= 127), and such that the scale
``2**(width - anchor)`` needs no clamp: anchors lie in [-600, 1024] (1024: an
infinite C), so ``width - anchor`` (width in [3, 47]) is a normal float64
exponent."""

_BIG = np.int64(1 << 60)
"""The aligned C term standing for an infinite C: far above any block sum,
so that scaled back it overflows to inf (no window of a unit is 60 bits wide)."""

_ALIGN = {"rtz": 0, "down": 1, "rne": 2, "sticky": 3}
_FINAL = {"rtz": 0, "down": 1, "rne": 2, "up": 3}

_TI = 128
"""Rows per tile: they share the block's slice of B in L1."""
_TJ = 128
"""Columns per tile: the loops over a tile's columns are the ones LLVM
vectorises."""
_FAST_BLOCKS = (4, 8, 16, 32)
"""Block lengths (``MatrixUnit.block``) with an unrolled fast path
(``_numba_blocks``, written by ``_numba_gen``)."""


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
        # an infinite v (exponent 1024: an earlier overflow) stays infinite:
        # clamped, the scales below stay normal numbers
        e = min(max(_exponent(vb), emin), 1023)
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
    y0, y1, y2, y3 = (np.float64(a[i, k0]), np.float64(a[i, k1]), np.float64(a[i, k2]),
                      np.float64(a[i, k3]))
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
        y0, y1, y2, y3 = (np.float64(a[i, k0]), np.float64(a[i, k1]), np.float64(a[i, k2]),
                      np.float64(a[i, k3]))
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


@numba.njit(inline="always")
def _c_exponents(ot, ecv, ii):
    """``ecv[ii, jj]``: the exponent C = ``ot[ii, jj]`` gives the anchor (as
    in :func:`_block`: clamped at fp32's emin, ``_ABSENT`` for zero)."""
    for jj in range(_TJ):
        v = ot[ii, jj]
        e = np.float32(max(_exponent(_as_bits(v)), -126))
        ecv[ii, jj] = e if v != 0.0 else np.float32(_ABSENT)


@numba.njit(inline="always")
def _fast_finish(ot, nt, ecv, e32v, f32v, s32v, ii, acode, mask, lo_plain, hi_plain):
    """The fast path's second pass over row ``ii`` of the tile ``ot``
    (float32, the accumulators C): the C term ``C * f`` (``f32v``: the scale
    ``2**(width - anchor)`` of the block's first pass) rounded to an integer
    (exact in float32: C has 24 bits and f is a power of two; a scaled C
    below 2**-126 is below 1 and rounds to 0), the block sum ``S = C term +
    s32v`` (each term below 2**31) added in float64, exact, truncated to the
    result's precision by clearing float64 bits (``mask``) and scaled back by ``1 / f`` (exact: the result is a
    normal float32 in the plain range) into ``nt``; C's exponent for the
    next block into ``ecv``.  Integer steps stay in 32-bit lanes (numba
    widens int32 arithmetic to int64, so the anchors are compared as given
    and the exponents handled as float32).

    Returns True when an anchor (``e32v``) lies outside ``[lo_plain,
    hi_plain]`` (the result may be subnormal or overflow; there ``f`` may be
    clamped): the caller then
    computes the row's block by the general path and discards ``nt`` and
    ``ecv``'s row.  That covers an infinite C (an earlier overflow): its
    exponent 1024 is the anchor, beyond ``hi_plain``.  An anchor below -126
    is not outside: here it means no nonzero term (a nonzero product's
    anchor is >= width - 127 >= -126 by ``_fast_ok``, a nonzero C's >= -126;
    a zero C is -127, a zero input ``_ABSENT``), so S = 0 and both paths
    give +0."""
    bad = False
    for jj in range(_TJ):
        f = f32v[jj]
        x = ot[ii, jj] * f
        if acode != 0:
            x = np.rint(x)
        # the block sum, exact in float64 (below 2**33)
        S = np.float64(np.int32(x)) + np.float64(s32v[jj])
        inv = np.int32(np.int32(254 << 23) - np.float32(f).view(np.int32)).view(np.float32)
        r = np.float32(_as_float(_as_bits(S) & mask) * np.float64(inv))
        nt[jj] = r
        # r is normal or zero: its exponent, or -127 for zero, which is below
        # every nonzero product's anchor here (_fast_ok: >= width - 127)
        ecv[ii, jj] = np.float32(np.int32(np.float32(r).view(np.int32) >> np.int32(23))
                                 & np.int32(255)) - np.float32(127)
        e = e32v[jj]
        # an anchor below -126 means no nonzero term (C = 0 is -127, a zero
        # input _ABSENT): S = 0 and both paths give +0
        low = (e < lo_plain) & (e >= np.int32(-126))
        bad |= low | (e > hi_plain)
    return bad


@numba.njit(cache=True, nogil=True)
def _general(ot, ii, a, bp, ea, ebp, t, i, k0, blk, zero, ks, anc, sc, s, width, acode,
             fcode, inv, lo_plain, hi_plain, mask, p, emin, big, tiny, flush):
    """One block of row ``i`` by the general path: the nonzero A entries
    gathered four at a time (:func:`_block`), then ``_finish_plain`` or
    ``_finish`` by the final rounding ``fcode``."""
    nk = 0
    for k in range(k0, k0 + blk):
        if a[i, k] != 0.0:
            ks[nk] = k
            nk += 1
    ng = max(1, (nk + 3) // 4)
    for k in range(nk, 4 * ng):
        ks[k] = zero
    if acode == 0:
        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s, width, 0)
    elif acode == 1:
        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s, width, 1)
    elif acode == 2:
        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s, width, 2)
    else:
        lo, hi = _block(ot, ii, a, bp, ea, ebp, t, i, ks, ng, anc, sc, s, width, 3)
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
