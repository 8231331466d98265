"""Optional compiled path of :func:`numlab.kernels.mma.mma` (numba).

The same algorithm as the numpy path of :mod:`numlab.kernels.mma`, step for
step, for units with ``interleave == 1`` and ``carry_bits is None``: per row
``i`` and per K block, the anchor exponent of every
column is the largest nominal exponent ``e_a + e_b`` of a nonzero product or
the exponent of C; each term is scaled by ``2**(23 + align_bits - anchor)``
(exact), rounded to an integer by the alignment rounding and added in
float64 (exact: the module docstring of ``mma`` bounds the sum below
``2**53``); the block result is the sum scaled back (exact) and rounded to
the result format by scaling to its quantum and applying ``trunc``/``rint``/
``floor``/``ceil``, or for truncation by clearing the float64 bits below the
quantum (every step exact, as in ``numlab.rounding``'s generic and bit
paths).  The loops over columns are written so that LLVM vectorises them;
rows are processed in tiles of ``_TILE`` so that a K block of B is read from
cache.  Single-threaded (numba's parallel mode doubled the compile time and
is not thread-safe under every threading layer).

tests/test_mma_model.py checks this path bit for bit against the numpy path
and against the exact scalar transcription of the MATLAB model.  Imported
only when numba is installed (it is optional).
"""

from __future__ import annotations

import numba
import numpy as np

_ABSENT = -(1 << 20)
"""Anchor of a column with no nonzero term (an exponent below every real one)."""

_MASKS = np.array([~((1 << k) - 1) for k in range(63)] + [-(1 << 63)], dtype=np.int64)
"""_MASKS[k] clears the k low bits of a float64's bit pattern (k = 63 keeps the sign)."""

_ALIGN = {"rtz": 0, "down": 1, "rne": 2, "sticky": 3}
_FINAL = {"rtz": 0, "down": 1, "rne": 2, "up": 3}


@numba.njit(inline="always")
def _pow2(e):
    """The bits of 2.0**e for -1022 <= e <= 1023."""
    return np.int64((e + 1023) << 52)


@numba.njit(inline="always")
def _exponent(bits):
    return ((bits >> 52) & 0x7FF) - 1023


@numba.njit(inline="always")
def _add_terms(s, a, i, b, k0, k1, sc, code):
    """s[j] += sum_k to_int(a[i, k] * b[k, j] * sc[j]) over k0 <= k < k1, with
    the alignment rounding ``code`` (the branch stays outside the loops so
    that each loop vectorises)."""
    n = s.shape[0]
    if code == 0:
        for k in range(k0, k1):
            x = a[i, k]
            if x != 0.0:
                y = b[k]
                for j in range(n):
                    s[j] += np.trunc(x * y[j] * sc[j])
    elif code == 1:
        for k in range(k0, k1):
            x = a[i, k]
            if x != 0.0:
                y = b[k]
                for j in range(n):
                    s[j] += np.floor(x * y[j] * sc[j])
    elif code == 2:
        for k in range(k0, k1):
            x = a[i, k]
            if x != 0.0:
                y = b[k]
                for j in range(n):
                    s[j] += np.rint(x * y[j] * sc[j])
    else:  # sticky: twice the truncation plus the OR of the lost bits
        for k in range(k0, k1):
            x = a[i, k]
            if x != 0.0:
                y = b[k]
                for j in range(n):
                    t = x * y[j] * sc[j]
                    r = np.trunc(t)
                    s[j] += 2.0 * r + (t != r) * np.sign(t)


@numba.njit(inline="always")
def _round_row(v, vb, out, qb, qib, p, emin, emax, code, flush):
    """out[j] = v[j] rounded to (p, emin, emax) by ``code``; +-inf from 2**(emax+1)."""
    q = qb.view(np.float64)
    qi = qib.view(np.float64)
    big = 2.0 ** (emax + 1)
    tiny = 2.0 ** emin
    n = v.shape[0]
    if code == 0:
        # truncation: clear the bits of v's float64 significand below the
        # quantum 2**(max(e, emin) - p + 1) (53 - p of them for a normal result)
        for j in range(n):
            k = min(53 - p + max(emin - _exponent(vb[j]), 0), 63)
            qb[j] = vb[j] & _MASKS[k]
        for j in range(n):
            out[j] = q[j]
    else:
        for j in range(n):
            e = max(_exponent(vb[j]), emin)
            qb[j] = _pow2(e - p + 1)
            qib[j] = _pow2(p - 1 - e)
    if code == 1:
        for j in range(n):
            out[j] = np.floor(v[j] * qi[j]) * q[j]
    elif code == 2:
        for j in range(n):
            out[j] = np.rint(v[j] * qi[j]) * q[j]
    elif code == 3:
        for j in range(n):
            out[j] = np.ceil(v[j] * qi[j]) * q[j]
    for j in range(n):
        r = out[j]
        r = r * np.inf if abs(r) >= big else r
        out[j] = 0.0 * v[j] if flush and abs(r) < tiny else r


_TILE = 16
"""Rows per tile: the K block of B (``block x N``) is reused from cache by
this many rows before the next block is read."""


@numba.njit(cache=True)
def run(a, b, ea, eb, c, blk, width, acode, fcode, p, emin, emax, flush, promote, out16):
    """D for the whole matrix (see the module docstring)."""
    M, Kp = a.shape
    N = b.shape[1]
    out = c.copy()
    one = np.ones((1, 1))
    ntiles = (M + _TILE - 1) // _TILE
    for t in range(ntiles):
        i0 = t * _TILE
        i1 = min(M, i0 + _TILE)
        acc = np.zeros((i1 - i0, N))
        if promote > 0:
            for i in range(i0, i1):
                acc[i - i0] = out[i]
                out[i] = 0.0
        anc = np.empty(N, np.int64)
        scb = np.empty(N, np.int64)
        sc = scb.view(np.float64)
        iscb = np.empty(N, np.int64)
        isc = iscb.view(np.float64)
        s = np.empty(N)
        v = np.empty(N)
        vb = v.view(np.int64)
        qb = np.empty(N, np.int64)
        qib = np.empty(N, np.int64)
        new = np.empty(N)
        for k0 in range(0, Kp, blk):
            for i in range(i0, i1):
                d = out[i]
                db = d.view(np.int64)
                for j in range(N):
                    e = max(_exponent(db[j]), -126)
                    anc[j] = e if d[j] != 0.0 else _ABSENT
                for k in range(k0, k0 + blk):
                    eik = ea[i, k]
                    ebk = eb[k]
                    for j in range(N):
                        anc[j] = max(anc[j], eik + ebk[j])
                for j in range(N):
                    w = min(max(width - anc[j], -1000), 1000)
                    scb[j] = _pow2(w)
                    iscb[j] = _pow2(-w)
                s[:] = 0.0
                _add_terms(s, one, 0, out[i:i + 1], 0, 1, sc, acode)  # the C term
                _add_terms(s, a, i, b, k0, k0 + blk, sc, acode)
                half = 0.5 if acode == 3 else 1.0
                for j in range(N):
                    v[j] = s[j] * isc[j] * half + 0.0  # exact; an exact zero sum is +0
                _round_row(v, vb, new, qb, qib, p, emin, emax, fcode, flush)
                for j in range(N):
                    if np.isfinite(d[j]):
                        d[j] = new[j] if anc[j] != _ABSENT else 0.0
                if promote > 0 and (k0 + blk) % promote == 0:
                    for j in range(N):
                        acc[i - i0, j] = np.float64(np.float32(acc[i - i0, j]) + np.float32(d[j]))
                        d[j] = 0.0
        if promote > 0:
            for i in range(i0, i1):
                d = out[i]
                for j in range(N):
                    d[j] = np.float64(np.float32(acc[i - i0, j]) + np.float32(d[j]))
                if out16:
                    v[:] = d
                    _round_row(v, vb, d, qb, qib, 11, -14, 15, 2, False)
    return out


def mma_numba(a, b, ea, eb, c, unit, fmt) -> np.ndarray:
    """Call :func:`run` with a unit's parameters (``a``, ``b`` padded to the block)."""
    return run(a, b, ea, eb, c, unit.block, 23 + unit.align_bits, _ALIGN[unit.align_rounding],
               _FINAL[unit.final_rounding], fmt.p, fmt.emin, fmt.emax,
               not unit.subnormals, unit.promote_every or 0, unit.out_fmt == "fp16")
