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
cache.  Row chunks run in Python threads (the compiled function releases the
GIL); numba's own parallel mode doubled the compile time.

tests/test_mma_model.py checks this path bit for bit against the numpy path
and against the exact scalar transcription of the MATLAB model.  Imported
only when numba is installed (it is optional).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

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
def _as_float(bits):
    return np.int64(bits).view(np.float64)


@numba.njit(inline="always")
def _as_bits(x):
    return np.float64(x).view(np.int64)


@numba.njit(inline="always")
def _rounded(v, p, emin, big, tiny, flush, code):
    """v (exact float64) rounded to (p, emin, emax) by ``code`` (0 rtz,
    1 down, 2 rne, 3 up); +-inf from 2**(emax+1) = ``big``; flushed below
    ``tiny`` when ``flush``.  ``code`` is a literal at each call site, so the
    branches fold away and the calling loop vectorises."""
    vb = _as_bits(v)
    if code == 0:
        # clear the float64 significand bits below the quantum
        # 2**(max(e, emin) - p + 1): 53 - p of them for a normal result
        k = min(53 - p + max(emin - _exponent(vb), 0), 63)
        r = _as_float(vb & _MASKS[k])
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
def _finish_row(d, s, anc, width, half, p, emin, big, tiny, flush, code):
    """d[j] <- the block result of column j (kept when d[j] is inf/NaN)."""
    for j in range(d.shape[0]):
        v = s[j] * _as_float(_pow2(-min(max(width - anc[j], -1000), 1000))) * half + 0.0
        r = _rounded(v, p, emin, big, tiny, flush, code)
        r = r if anc[j] != _ABSENT else 0.0
        d[j] = r if np.isfinite(d[j]) else d[j]


_TILE = 16
"""Rows per tile: the K block of B (``block x N``) is reused from cache by
this many rows before the next block is read."""


@numba.njit(cache=True, nogil=True)
def run(a, b, ea, eb, c, blk, width, acode, fcode, p, emin, emax, flush, promote, out16):
    """D for the whole matrix (see the module docstring)."""
    M, Kp = a.shape
    N = b.shape[1]
    out = c.copy()
    one = np.ones((1, 1))
    big = 2.0 ** (emax + 1)
    tiny = 2.0 ** emin
    half = 0.5 if acode == 3 else 1.0
    ntiles = (M + _TILE - 1) // _TILE
    anc = np.empty(N, np.int32)
    scb = np.empty(N, np.int64)
    sc = scb.view(np.float64)
    s = np.empty(N)
    for t in range(ntiles):
        i0 = t * _TILE
        i1 = min(M, i0 + _TILE)
        acc = np.zeros((i1 - i0, N))
        if promote > 0:
            for i in range(i0, i1):
                acc[i - i0] = out[i]
                out[i] = 0.0
        for k0 in range(0, Kp, blk):
            for i in range(i0, i1):
                d = out[i]
                for j in range(N):
                    e = max(_exponent(_as_bits(d[j])), -126)
                    anc[j] = e if d[j] != 0.0 else _ABSENT
                for k in range(k0, k0 + blk):
                    eik = ea[i, k]
                    ebk = eb[k]
                    for j in range(N):
                        anc[j] = max(anc[j], eik + ebk[j])
                for j in range(N):
                    scb[j] = _pow2(min(max(width - anc[j], -1000), 1000))
                s[:] = 0.0
                _add_terms(s, one, 0, out[i:i + 1], 0, 1, sc, acode)  # the C term
                _add_terms(s, a, i, b, k0, k0 + blk, sc, acode)
                if fcode == 0:
                    _finish_row(d, s, anc, width, half, p, emin, big, tiny, flush, 0)
                elif fcode == 1:
                    _finish_row(d, s, anc, width, half, p, emin, big, tiny, flush, 1)
                elif fcode == 2:
                    _finish_row(d, s, anc, width, half, p, emin, big, tiny, flush, 2)
                else:
                    _finish_row(d, s, anc, width, half, p, emin, big, tiny, flush, 3)
                if promote > 0 and (k0 + blk) % promote == 0:
                    for j in range(N):
                        acc[i - i0, j] = np.float64(np.float32(acc[i - i0, j]) + np.float32(d[j]))
                        d[j] = 0.0
        if promote > 0:
            for i in range(i0, i1):
                d = out[i]
                for j in range(N):
                    v = np.float64(np.float32(acc[i - i0, j]) + np.float32(d[j]))
                    d[j] = _rounded(v, 11, -14, 65536.0, 0.0, False, 2) if out16 else v
    return out


def mma_numba(a, b, ea, eb, c, unit, fmt) -> np.ndarray:
    """Call :func:`run` with a unit's parameters (``a``, ``b`` padded to the
    block) on row chunks in threads (``run`` releases the GIL; rows are
    independent, so the bits do not depend on the number of threads)."""
    args = (unit.block, 23 + unit.align_bits, _ALIGN[unit.align_rounding],
            _FINAL[unit.final_rounding], fmt.p, fmt.emin, fmt.emax,
            not unit.subnormals, unit.promote_every or 0, unit.out_fmt == "fp16")
    M = a.shape[0]
    nthreads = min(len(os.sched_getaffinity(0)), max(1, M // (4 * _TILE)))
    if nthreads <= 1:
        return run(a, b, ea, eb, c, *args)
    step = -(-M // nthreads // _TILE) * _TILE
    parts = [(r, min(M, r + step)) for r in range(0, M, step)]
    with ThreadPoolExecutor(len(parts)) as pool:
        outs = list(pool.map(lambda rr: run(a[rr[0]:rr[1]], b, ea[rr[0]:rr[1]], eb,
                                            c[rr[0]:rr[1]], *args), parts))
    return np.concatenate(outs, axis=0)
