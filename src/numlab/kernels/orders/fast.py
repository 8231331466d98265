"""The fast path of the orders: row chunks transposed into cache-sized ``(n, W)`` tiles.

Every order with a fast path (:meth:`Order._fast <numlab.kernels.orders.Order>`)
reduces axis -2 of a tile whose last axis holds ``W >= 2`` independent rows, so
each numpy call is one vector operation over W rows (or over W rows times
tiles/lanes).  A tile is ~``_TILE_BYTES``: it stays in L2.  :func:`_sum_fast`
cuts the rows into such tiles and calls the order on each; it knows orders only
through their methods (``_fast``, ``_rows_compiled``, ``_streams``), so it sits
below them.  Tests pin it bit for bit to the orders' reference loops
(tests/test_kernels_reduce.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...formats import BF16, FP16
from .. import _accel
from .._common import Arith

_TILE_BYTES = 1 << 20  # bytes of a tile: it stays in L2
_RT_SCALE = 4
_FILL_ROWS = 64  # rows transposed per copy: more thrash the cache sets (power-of-two strides)
# inputs of at least this many elements use the compiled kernels when numba is
# installed (smaller ones would pay numba's import and dispatch for nothing)
_ACCEL_MIN_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class _FastAcc:
    """The accumulator arithmetic of the fast path, on tiles of ``dtype``.

    * fp32 / fp64, round to nearest even: IEEE binary32/binary64 arithmetic
      (``rt`` None).
    * fp16 / bf16: float32 tiles; each float32 sum or difference of two 16-bit
      values is rounded by an ``astype`` round trip through ``rt`` (numpy's
      float16, ml_dtypes' bfloat16: round to nearest even, subnormals and
      overflow to inf included).  With ``2 p + 2 <= 24`` that double rounding is
      innocuous (Figueroa 1995): each result is the correctly rounded 16-bit
      value, the same as :class:`Arith`'s.  Sequential reduces in ``rt`` itself:
      numpy/ml_dtypes add two 16-bit values as one float32 sum, rounded.
    """

    dtype: np.dtype
    rt: object = None
    accel: bool = False  # use numlab.kernels._accel's compiled kernels (same bits)

    def add(self, a, b, out=None):
        r = np.add(a, b, out=out)
        if self.rt is not None:
            np.copyto(r, r.astype(self.rt), casting="unsafe")
        return r

    def sub(self, a, b, out=None):
        r = np.subtract(a, b, out=out)
        if self.rt is not None:
            np.copyto(r, r.astype(self.rt), casting="unsafe")
        return r


def _fast_acc(ar) -> "_FastAcc | None":
    """The fast arithmetic for ``ar`` (an :class:`Arith`), or None (other formats/modes)."""
    if not isinstance(ar, Arith) or ar.rounding != "rne":
        return None
    if ar.native:
        return _FastAcc(ar.dtype)
    if (ar.fmt == FP16 or ar.fmt == BF16) and ar.dtype == np.float32:
        return _FastAcc(np.dtype(np.float32), ar.fmt.container)
    return None


def _butterfly_fast(v: np.ndarray, fa: _FastAcc) -> np.ndarray:
    """The lane butterfly of ``Lanes`` (``classic._combine_lanes``) over axis -2
    (lane i += lane i + h)."""
    while v.shape[-2] > 1:
        m = v.shape[-2]
        h = (m + 1) // 2
        nxt = v[..., :h, :].copy()  # lanes i >= m - h have no partner: carried
        fa.add(nxt[..., : m - h, :], v[..., h:m, :], out=nxt[..., : m - h, :])
        v = nxt
    return v[..., 0, :]


def _rows_view(x: np.ndarray) -> np.ndarray:
    """``x`` (..., n) as (rows, n): a view for 1-D/2-D input of any strides."""
    if x.ndim == 1:
        return x[None]
    if x.ndim == 2:
        return x
    return x.reshape(-1, x.shape[-1])


def _bf16_widen_T(dst: np.ndarray, blk: np.ndarray, buf=None) -> bool:
    """``dst[...] = blk.T`` widened from bfloat16 to float32, by integer ops; False if
    ``blk``'s layout does not allow it (then the caller takes the generic path).

    Four bf16 values are moved at a time as one uint64 (a cheap 8-byte transpose);
    the float32 bits of the e-th of them are bits ``16 e .. 16 e + 15`` of ``w`` moved
    to the top of a uint32 (one shift or mask on each 32-bit half of ``w``): bf16
    is the upper half of a binary32, so the widening is exact for every value
    (NaN payloads included).
    """
    r, n = blk.shape
    n4 = n - n % 4
    if not np.little_endian or n4 == 0 or blk.strides[1] != 2 or blk.strides[0] % 8 or blk.ctypes.data % 8:
        return False
    buf = buf or (lambda shape, dt, key: np.empty(shape, dt))
    w = buf((n4 // 4, r), np.uint64, "w")
    np.copyto(w, blk[:, :n4].view(np.uint16).view(np.uint64).T)
    d = dst[:n4].view(np.uint32).reshape(n4 // 4, 4, r)
    # little endian: the uint32 halves of w hold values (0, 1) and (2, 3); two
    # contiguous uint64 ops put each value at the top of its half, then four
    # strided copies interleave them
    mask = np.uint64(0xFFFF0000FFFF0000)
    a = np.left_shift(w, np.uint64(16), out=buf(w.shape, np.uint64, "a"))
    np.bitwise_and(a, mask, out=a)
    np.bitwise_and(w, mask, out=w)
    a32, b32 = a.view(np.uint32).reshape(n4 // 4, r, 2), w.view(np.uint32).reshape(n4 // 4, r, 2)
    np.copyto(d[:, 0, :], a32[..., 0])
    np.copyto(d[:, 1, :], b32[..., 0])
    np.copyto(d[:, 2, :], a32[..., 1])
    np.copyto(d[:, 3, :], b32[..., 1])
    if n4 < n:
        np.copyto(dst[n4:], blk[:, n4:].T, casting="unsafe")
    return True


def _sum_fast(x: np.ndarray, order, fa: _FastAcc, ar: Arith, *, prepared: bool,
              square: bool = False) -> np.ndarray:
    """Sum the last axis of ``x`` by ``order`` (an :class:`~numlab.kernels.orders.Order`
    with a fast path) in row chunks; returns ``ar.dtype`` values.

    ``prepared``: ``x`` already holds values of ``ar``'s format; otherwise ``x`` is
    the caller's container and each chunk is rounded to the accumulator as
    :meth:`Arith.round` does (``square``: then squared, ``fl(x*x)``, for sumsq).
    Rows are taken ``W`` at a time and transposed into an ``(n, W)`` tile of
    ``fa.dtype``; Kahan (one numpy call per element) and Sequential instead
    stream column tiles of up to 4096 rows, carrying each row's state, so that
    each numpy call spans many rows.
    Extra memory: one tile plus the result, whatever the input size.

    With numba (a default dependency), from ``_ACCEL_MIN_ELEMENTS`` values on, the same
    operations run compiled (:mod:`numlab.kernels._accel`, the orders' ``_rows_compiled``,
    tile fill, Kahan/Pairwise tile steps); ``NUMLAB_ACCEL=0`` switches it off.
    """
    lead, n = x.shape[:-1], x.shape[-1]
    if n == 0:
        return np.zeros(lead, ar.dtype)
    X = _rows_view(x)
    rows = X.shape[0]
    out = np.empty(rows, fa.dtype)
    isz = fa.dtype.itemsize
    # the input's values already lie in acc's format: a plain (exact or, for native
    # fp32/fp64, the same RNE) cast replaces Arith.round
    direct = prepared or (not square and (ar.native or X.dtype == np.dtype(ar.fmt.container)))

    if x.size >= _ACCEL_MIN_ELEMENTS and not fa.accel and _accel.kernels() is not None:
        fa = _FastAcc(fa.dtype, fa.rt, accel=True)
    if fa.accel and fa.rt is None and direct and fa.dtype == np.float32 and order._rows_compiled(X, out):
        return out.reshape(lead).astype(ar.dtype, copy=False)
    scratch: dict = {}

    def buf(shape, dt, key):
        """A reused work array: fresh 1 MB arrays per chunk would cost page faults."""
        k = (key, tuple(shape), np.dtype(dt))
        if k not in scratch:
            scratch[k] = np.empty(shape, dt)
        return scratch[k]

    def fill(dst, blk):  # dst (cols, r) <- blk (r, cols), rounded to the accumulator
        if not direct:
            blk = ar.round(blk)
            if square:
                blk = ar.mul(blk, blk)
        if fa.accel and _accel.widen_t(dst, blk):
            return
        if blk.dtype == BF16.container and dst.dtype == np.float32 and _bf16_widen_T(dst, blk, buf):
            return
        if blk.dtype == dst.dtype or blk.dtype.itemsize < dst.dtype.itemsize:
            # transpose the raw bits (an unsigned-int copy: fast for any float dtype,
            # including ml_dtypes' bfloat16), then one contiguous cast if it widens
            u = np.dtype(f"u{blk.dtype.itemsize}")
            if blk.dtype == dst.dtype:
                np.copyto(dst.view(u), blk.view(u).T)
                return
            nt = buf(dst.shape, u, "nt")
            np.copyto(nt, blk.view(u).T)
            np.copyto(dst, nt.view(blk.dtype), casting="unsafe")  # exact widening
        else:
            np.copyto(dst, blk.T, casting="unsafe")  # values already on acc's grid: exact

    # numpy's Kahan is one call per element step: streamed over up to 4096 rows at a
    # time to amortise them (the compiled Kahan needs no such width)
    stream = order._streams and not (fa.accel and fa.rt is None)
    # tile (+ its transposition temporary) <= the budget and <= the input's own size
    # (rounding accumulators make three numpy calls per add: wider tiles amortise them)
    scale = (4 if stream else 1) * (_RT_SCALE if fa.rt is not None else 1)
    budget = min(scale * _TILE_BYTES, rows * n * X.dtype.itemsize * isz // (isz + X.dtype.itemsize))
    if stream:  # one sum per row carried across column tiles of up to 4096 rows each
        W = max(2, min(rows, 4096))
        C = max(1, budget // (W * isz))
    else:
        W = max(2, min(rows, budget // (n * isz)))
        W = W if W <= _FILL_ROWS else W - W % _FILL_ROWS
        C = n
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, rows, W):
            r = min(W, rows - i)
            w = max(r, 2)  # W >= 2 keeps the reduced axis an outer one (Sequential._fast)
            if stream:
                state = (np.full(w, -0.0, fa.dtype), np.zeros(w, fa.dtype))
            for j in range(0, n, C):
                cw = min(C, n - j)
                tile = buf((cw, w), fa.dtype, "tile")
                if w > r:
                    tile[:, r:] = 0
                for k in range(0, r, _FILL_ROWS):
                    kr = min(r, k + _FILL_ROWS)
                    fill(tile[:, k:kr], X[i + k:i + kr, j:j + cw])
                if stream:
                    order._fast(tile, fa, state)
                else:
                    out[i:i + r] = order._fast(tile, fa)[:r]
            if stream:
                out[i:i + r] = state[0][:r]
    return out.reshape(lead).astype(ar.dtype, copy=False)

