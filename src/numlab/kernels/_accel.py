"""Optional compiled kernels for the reduction fast path (numba, a default dependency).

numpy cannot reach some of the speed targets of the chunked reductions on a
small machine: filling a transposed float32 tile from bfloat16 rows (a strided
16-bit gather numpy performs one element at a time) and Kahan summation (four
numpy calls per element step).  When numba is installed these few kernels do
exactly the same operations:

* :func:`widen_t` -- ``dst[i, k] = float32(src[k, i])`` for bfloat16 (the 16
  bits moved to the top of a binary32: exact for every pattern, NaN payloads
  included) and float16 (a table of the 65536 exact float32 values, built by
  numpy's own float16 -> float32 cast); pure data movement, no arithmetic;
* :func:`add_round32` -- the fp32 step of ``block_fma`` matmul after its BLAS
  call, ``out = RN32(fl64(S + c))`` and the flag of float64 sums that sit on an
  fp32 midpoint (low 29 significand bits ``1 << 28``), in one pass instead of
  numpy's four (:func:`numlab.kernels.tiled_matmul._tile_certified_exact`); the
  conversion is the same hardware instruction numpy's cast uses (``cvtsd2ss``:
  round to nearest even, overflow to inf);
* :func:`rows_direct` -- Sequential and Blocked(T, sequential, sequential)
  straight from the 16-bit rows (eight rows at a time), with no tile;
* :func:`rows_order` -- Pairwise and Lanes row by row from a widened copy of
  the row (contiguous, so the lane loop is one SIMD add per vector);
* :func:`welford32` -- the float32 Welford loop of the engine's layer norm
  (:func:`numlab.kernels.reduction.welford`);
* :func:`kahan` -- the compensated step of :meth:`numlab.kernels.orders.Kahan._fast`,
  ``y = x - c; t = s + y; c = (t - s) - y; s = t``, in the tile's IEEE dtype
  (float32/float64), each operation rounded once: numba compiles without
  ``fastmath``, so LLVM neither reassociates nor contracts, and the loop over
  the W independent rows is the only one it vectorises.

The numpy path stays the reference: tests/test_kernels_reduce.py runs the whole
fast-path suite with and without these kernels against ``_reduce_reference``.
``NUMLAB_ACCEL=0`` in the environment switches them off.
"""

from __future__ import annotations

import numpy as np

from .. import accel

_STATE: dict = {}


def kernels():
    """The compiled kernels (a dict of name -> function), or None when numba is not
    installed or ``NUMLAB_ACCEL=0``.  Compiled (or loaded from numba's cache) on
    first use."""
    if not accel.enabled():
        return None
    if "k" not in _STATE:
        _STATE["k"] = _build()
    return _STATE["k"]


def _build():
    """Compile (lazily, per signature) every kernel; None without numba.

    numba is imported only here, so each family of kernels is made by a
    function taking the decorator (``_widen_kernels`` ... ``_welford32``)."""
    numba = accel.numba_module()
    if numba is None:
        return None
    jit = numba.njit(cache=True, nogil=True)
    return {
        **_widen_kernels(jit),
        **_tile_kernels(jit),
        "add_round32": _add_round32(jit),
        "rows_direct": {True: _rows_direct(jit, True), False: _rows_direct(jit, False)},
        "row_kernels": {True: _row_kernels(jit, True), False: _row_kernels(jit, False)},
        "welford32": _welford32(jit),
        "f16_lut": np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32),
    }


def _widen_kernels(jit) -> dict:
    """The compiled kernels of :func:`widen_t`: ``widen_t_shift`` and
    ``widen_t_shift4`` (bfloat16, one or four codes per load), ``widen_t_lut``
    (float16 through the table)."""

    @jit
    def widen_t_shift(src, dst):  # src (r, c) uint16 bfloat16 bits, dst (c, r) uint32
        r, c = src.shape
        for i in range(c):
            for k in range(r):
                dst[i, k] = np.uint32(src[k, i]) << np.uint32(16)

    @jit
    def widen_t_shift4(src, dst):  # src (r, c/4) uint64 = 4 bfloat16 each, dst (c, r) uint32
        # little endian: value e of the 4 is bits 16 e .. 16 e + 15 of the uint64
        r, c4 = src.shape
        hi = np.uint32(0xFFFF0000)
        for i in range(c4):
            for k in range(r):
                w = src[k, i]
                dst[4 * i, k] = np.uint32(w << np.uint64(16))
                dst[4 * i + 1, k] = np.uint32(w) & hi
                dst[4 * i + 2, k] = np.uint32(w >> np.uint64(16)) & hi
                dst[4 * i + 3, k] = np.uint32(w >> np.uint64(32)) & hi

    @jit
    def widen_t_lut(src, lut, dst):  # src (r, c) uint16 float16 bits, dst (c, r) float32
        r, c = src.shape
        for i in range(c):
            for k in range(r):
                dst[i, k] = lut[src[k, i]]

    return {"widen_t_shift": widen_t_shift, "widen_t_shift4": widen_t_shift4, "widen_t_lut": widen_t_lut}


def _tile_kernels(jit) -> dict:
    """The compiled kernels of :func:`kahan` and :func:`pairwise` (on float32/float64 tiles)."""

    @jit
    def kahan(t, s, c):  # t (B, m, W); s, c (B, W), updated in place
        B, m, W = t.shape
        for b in range(B):
            # private copies: numba cannot prove s, c and t do not alias, and would
            # not vectorise the loop over the W independent rows otherwise
            ss, cc = s[b].copy(), c[b].copy()
            for i in range(m):
                for j in range(W):
                    y = t[b, i, j] - cc[j]
                    nt = ss[j] + y
                    cc[j] = (nt - ss[j]) - y
                    ss[j] = nt
            s[b, :] = ss
            c[b, :] = cc

    @jit
    def pairwise(t):  # t (B, m, W), reduced in place into t[:, 0]
        B, m, W = t.shape
        for b in range(B):
            step = 1
            while step < m:  # the elements of a level sit at multiples of step
                for k in range(0, m - step, 2 * step):  # the odd last one is carried
                    for j in range(W):
                        t[b, k, j] = t[b, k, j] + t[b, k + step, j]
                step *= 2

    return {"kahan": kahan, "pairwise": pairwise}


def _add_round32(jit):
    """The compiled kernel of :func:`add_round32`."""

    @jit
    def add_round32(sm, c, out, flag):  # (M, N): out = RN32(fl64(sm + c)), flag fp32 midpoints
        M, N = sm.shape
        v = np.empty(N, np.float64)
        vb = v.view(np.uint64)
        low, half = np.uint64(0x1FFFFFFF), np.uint64(0x10000000)
        cnt = 0
        for i in range(M):
            for j in range(N):
                v[j] = sm[i, j] + np.float64(c[i, j])
            for j in range(N):
                out[i, j] = np.float32(v[j])
                f = (vb[j] & low) == half
                flag[i, j] = f
                cnt += f
        return cnt

    return add_round32


def _rows_direct(jit, bf16: bool):
    """The compiled :func:`rows_direct` kernel for bfloat16 (``bf16``) or float16 codes."""
    # Row sums of src (uint16 codes: bfloat16, or float16 through lut; rows a
    # multiple of 8), eight rows at a time as eight independent float32 chains
    # (fixed trip counts: LLVM keeps them in registers): tiles of T elements
    # summed sequentially from -0.0, the tile partials summed sequentially from
    # -0.0 (T >= n: plain sequential, no outer add)
    @jit
    def rows_direct(src, lut, T, out):
        R, n = src.shape
        bits = np.empty(8, np.uint32)
        vals = bits.view(np.float32)
        s = np.empty(8, np.float32)
        p = np.empty(8, np.float32)
        for r0 in range(0, R, 8):
            for k in range(8):
                s[k] = -0.0
            for t0 in range(0, n, T):
                for k in range(8):
                    p[k] = -0.0
                for i in range(t0, min(n, t0 + T)):
                    if bf16:
                        for k in range(8):
                            bits[k] = np.uint32(src[r0 + k, i]) << np.uint32(16)
                    else:
                        for k in range(8):
                            vals[k] = lut[src[r0 + k, i]]
                    for k in range(8):
                        p[k] = p[k] + vals[k]
                if T >= n:
                    for k in range(8):
                        s[k] = p[k]
                else:
                    for k in range(8):
                        s[k] = s[k] + p[k]
            for k in range(8):
                out[r0 + k] = s[k]
    return rows_direct


def _row_kernels(jit, bf16: bool):
    """The compiled kernels of :func:`rows_order` for bfloat16 (``bf16``) or float16
    codes: ``(rows_lanes, rows_pairwise)``."""
    @jit
    def widen_row(src, r, lut, buf, bits):  # buf (float32) = row r of src, exactly
        n = src.shape[1]
        if bf16:
            for i in range(n):
                bits[i] = np.uint32(src[r, i]) << np.uint32(16)
        else:
            for i in range(n):
                buf[i] = lut[src[r, i]]

    @jit
    def rows_lanes(src, lut, L, tree, masked, out):
        # Lanes(L): lane j sums x_j, x_{j+L}, ... sequentially from -0.0 (a masked
        # last vector adds -0.0 in its inactive lanes), lanes combined by the
        # butterfly (tree) or left to right from -0.0; an epilogue adds the
        # n mod L leftovers one by one
        R, n = src.shape
        bits = np.empty(n, np.uint32)
        buf = bits.view(np.float32)
        lane = np.empty(L, np.float32)
        m = (n + L - 1) // L if masked else n // L
        for r in range(R):
            widen_row(src, r, lut, buf, bits)
            for j in range(L):
                lane[j] = -0.0
            for i in range(m):
                base = i * L
                if base + L <= n:
                    for j in range(L):
                        lane[j] = lane[j] + buf[base + j]
                else:
                    for j in range(L):
                        lane[j] = lane[j] + (buf[base + j] if base + j < n else np.float32(-0.0))
            if m == 0:
                s = np.float32(-0.0)
            elif tree:
                mm = L
                while mm > 1:
                    h = (mm + 1) // 2
                    for j in range(mm - h):
                        lane[j] = lane[j] + lane[j + h]
                    mm = h
                s = lane[0]
            else:
                s = np.float32(-0.0)
                for j in range(L):
                    s = s + lane[j]
            for i in range(m * L, n):
                s = s + buf[i]
            out[r] = s

    @jit
    def rows_pairwise(src, lut, out):
        # adjacent pairs level by level, an odd last element carried up unchanged
        R, n = src.shape
        bits = np.empty(n, np.uint32)
        a = bits.view(np.float32)
        b = np.empty(n, np.float32)
        for r in range(R):
            widen_row(src, r, lut, a, bits)
            x, y = a, b
            m = n
            while m > 1:
                h = m // 2
                for k in range(h):
                    y[k] = x[2 * k] + x[2 * k + 1]
                if m % 2:
                    y[h] = x[m - 1]
                m = h + m % 2
                x, y = y, x
            out[r] = x[0]

    return rows_lanes, rows_pairwise


def _welford32(jit):
    """The compiled kernel of :func:`welford32`."""

    @jit
    def welford32(xt, m, m2):  # xt (n, rows) float32; m, m2 (rows,) float32, updated in place
        n, R = xt.shape
        mm, qq = m.copy(), m2.copy()  # private: alias-free, so the row loop vectorises
        for k in range(n):
            kk = np.float32(k + 1)
            for j in range(R):
                x = xt[k, j]
                d = x - mm[j]
                mm[j] = mm[j] + d / kk
                qq[j] = qq[j] + d * (x - mm[j])
        m[:] = mm
        m2[:] = qq

    return welford32


def widen_t(dst: np.ndarray, blk: np.ndarray) -> bool:
    """``dst[...] = blk.T`` widened to float32 for a bfloat16 or float16 ``blk`` (2-D,
    any strides); False (nothing written) when the kernels are unavailable or the
    dtypes are others."""
    k = kernels()
    if k is None or dst.dtype != np.float32 or blk.ndim != 2:
        return False
    if blk.dtype == np.float16:
        k["widen_t_lut"](blk.view(np.uint16), k["f16_lut"], dst)
        return True
    if blk.dtype.name == "bfloat16" and blk.dtype.itemsize == 2:
        u, d = blk.view(np.uint16), dst.view(np.uint32)
        c4 = u.shape[1] // 4 if np.little_endian and u.strides[1] == 2 and u.strides[0] % 8 == 0 \
            and u.ctypes.data % 8 == 0 else 0
        if c4:  # four values per 8-byte load
            k["widen_t_shift4"](u[:, :4 * c4].view(np.uint64), d)
        k["widen_t_shift"](u[:, 4 * c4:], d[4 * c4:])
        return True
    return False


def rows_direct(X: np.ndarray, tile: int, out: np.ndarray) -> bool:
    """Row sums of ``X`` (2-D bfloat16/float16) into float32 ``out`` straight from the
    16-bit codes, without a transposed tile, in the order
    ``Blocked(tile, sequential, sequential)`` (``tile >= n``: Sequential): the same
    float32 additions, in the same order, as the tile path.  False when unavailable."""
    k = kernels()
    if k is None or X.ndim != 2 or out.dtype != np.float32 or X.dtype.itemsize != 2:
        return False
    if X.dtype == np.float16:
        f = k["rows_direct"][False]
    elif X.dtype.name == "bfloat16":
        f = k["rows_direct"][True]
    else:
        return False
    u, T = X.view(np.uint16), max(1, int(tile))
    R8 = u.shape[0] - u.shape[0] % 8
    if R8:
        f(u[:R8], k["f16_lut"], T, out[:R8])
    if R8 < u.shape[0]:  # the last rows, padded to a block of 8 with copies of the last one
        pad = np.concatenate([u[R8:], np.repeat(u[-1:], R8 + 8 - u.shape[0], axis=0)])
        res = np.empty(8, np.float32)
        f(pad, k["f16_lut"], T, res)
        out[R8:] = res[: u.shape[0] - R8]
    return True


def rows_order(X: np.ndarray, order, out: np.ndarray) -> bool:
    """Row sums of ``X`` (2-D bfloat16/float16) into float32 ``out`` by a ``Pairwise`` or
    ``Lanes`` order, one row at a time from its widened copy (the same float32
    additions in the same order as the tile path).  False when unavailable."""
    k = kernels()
    if k is None or X.ndim != 2 or out.dtype != np.float32 or X.dtype.itemsize != 2 or X.shape[1] == 0:
        return False
    if X.dtype == np.float16:
        lanes, pw = k["row_kernels"][False]
    elif X.dtype.name == "bfloat16":
        lanes, pw = k["row_kernels"][True]
    else:
        return False
    u = X.view(np.uint16)
    name = type(order).__name__
    if name == "Pairwise":
        pw(u, k["f16_lut"], out)
    elif name == "Lanes":
        lanes(u, k["f16_lut"], int(order.L), order.combine == "tree", order.tail == "masked", out)
    else:
        return False
    return True


def welford32(xt: np.ndarray, m: np.ndarray, m2: np.ndarray) -> bool:
    """Welford's float32 steps of :func:`numlab.kernels._common.welford_steps` (native
    fp32 branch: ``d = x_k - m; m = m + d / fl(k+1); M2 = M2 + d * (x_k - m)``, each
    operation rounded once, no FMA) over the rows of ``xt`` (``(n, rows)``),
    continuing ``m`` and ``m2`` in place: its compiled twin, called by
    :func:`numlab.kernels.reduction.welford`.  False when unavailable.  Tests pin it
    to that loop bit for bit."""
    k = kernels()
    if (k is None or xt.ndim != 2 or xt.dtype != np.float32 or m.dtype != np.float32
            or m2.dtype != np.float32 or m.shape != xt.shape[1:] or m2.shape != m.shape):
        return False
    k["welford32"](xt, m, m2)
    return True


def pairwise(t: np.ndarray) -> np.ndarray | None:
    """The adjacent-pairs tree over axis -2 of ``t`` (``(..., m, W)``, float32/float64,
    odd element carried) on a copy, as :meth:`numlab.kernels.orders.Pairwise._fast`;
    returns the ``(..., W)`` sums, or None when unavailable."""
    k = kernels()
    if k is None or t.dtype not in (np.float32, np.float64):
        return None
    lead = t.shape[:-2]
    t3 = np.array(t, copy=True, order="C").reshape((-1,) + t.shape[-2:])
    k["pairwise"](t3)
    return t3[:, 0, :].reshape(lead + t.shape[-1:])


def add_round32(sm: np.ndarray, c: np.ndarray, out: np.ndarray, flag: np.ndarray) -> int | None:
    """``out = float32(sm + c)`` (float64 sum), ``flag`` = the sum is an fp32 midpoint;
    returns the number flagged, or None (nothing written) when unavailable or the
    operands are not same-shape 2-D arrays."""
    k = kernels()
    if (k is None or sm.ndim != 2 or np.shape(c) != sm.shape or out.shape != sm.shape
            or flag.shape != sm.shape or sm.dtype != np.float64 or out.dtype != np.float32
            or np.asarray(c).dtype not in (np.float32, np.float64)):
        return None
    return int(k["add_round32"](sm, c, out, flag))


def kahan(t: np.ndarray, s: np.ndarray, c: np.ndarray) -> bool:
    """Kahan steps over axis -2 of ``t`` (shape ``(..., m, W)``, float32/float64)
    continuing ``(s, c)`` (shape ``(..., W)``) in place; False when unavailable."""
    k = kernels()
    if k is None or t.dtype not in (np.float32, np.float64) or s.dtype != t.dtype or c.dtype != t.dtype:
        return False
    B = int(np.prod(t.shape[:-2], dtype=np.int64))
    t3 = t.reshape((B,) + t.shape[-2:])
    s2, c2 = s.reshape(B, s.shape[-1]), c.reshape(B, c.shape[-1])
    if not (np.shares_memory(s2, s) or s.size == 0) or not (np.shares_memory(c2, c) or c.size == 0):
        return False  # the state must be updated in place
    k["kahan"](t3, s2, c2)
    return True

