"""Instruction choice: ``x * s`` by broadcast or by a scalar unit; FMA or not.

``broadcast``
    The scalar is first materialised as a tensor in the storage format S
    (rounded to S with ``broadcast_rounding``), then a vector multiply rounds
    each product to the result format with ``rounding``.
``muls``
    A scalar-multiply instruction (Ascend ``Muls``, a vector-by-scalar-register
    multiply) keeps ``s`` in fp32 (rounded to fp32 with ``scalar_rounding``);
    the product of x and that fp32 scalar is rounded once to the result format
    with ``rounding``.

So the two give identical bits whenever ``round_to(s, S) == round_to(s, FP32)``
(in particular when ``s`` is a value of S), and otherwise differ for some
``x`` -- except when ``round_to(s, S)`` is a power of two: then ``x * s_S`` is
on the S grid and ``x * s_32`` is less than half an ulp away, so both round to
the same value.  Tested exhaustively over all fp16 ``x`` for a set of scalars.

Products of two values with at most 26 significant bits are exact in float64,
so "rounded once" is implemented as the exact float64 product followed by one
:func:`~numlab.rounding.round_to` (fp32/rne uses native float32 multiply, which
is the same thing).  ``fma(a, b, c)`` rounds ``a*b + c`` once
(:func:`numlab.primitives.fma`: TwoSum plus round-to-odd in float64);
``mul_add`` rounds the product and then the sum (two roundings).
"""

from __future__ import annotations

import numpy as np

from ..formats import FP32, get_format
from ..primitives import _two_sum, in_domain
from ..primitives import fma as _exact_fma
from ..rounding import check_rounding
from . import _accel
from ._common import (
    as_values,
    check_choice,
    round_sum2,
    round_to,
    to_container,
)

__all__ = ["scalar_mul", "fma", "fma_f32", "mul_add", "multiply_add", "SCALAR_MUL_CHOICES"]

SCALAR_MUL_CHOICES = ("muls", "broadcast")


def _scalar_value(s) -> float:
    a = np.asarray(s)
    if a.ndim != 0:
        raise ValueError(f"s must be a scalar, got an array of shape {a.shape}")
    if a.dtype.kind not in "fiu" and a.dtype.name != "bfloat16":
        raise TypeError(f"s must be a real number, got {a.dtype}")
    return float(a.astype(np.float64))


def scalar_mul(
    x,
    s,
    *,
    fmt,
    how: str = "muls",
    storage=None,
    rounding: str = "rne",
    scalar_rounding: str = "rne",
    broadcast_rounding: str = "rne",
):
    """``x * s`` for a Python/numpy scalar ``s`` by the chosen instruction.

    Parameters
    ----------
    x : array_like
        Float container of values (at most 24 significant bits for exactness).
    s : float
        The scalar (e.g. ``1/sqrt(d)`` or ``0.044715``), given in fp64.
    fmt : Format or str
        Format of the product (S in an eager kernel, fp32 inside a fused block).
    how : {"muls", "broadcast"}
        Instruction (module docstring).
    storage : Format or str, optional
        Format the broadcast tensor is materialised in (default ``fmt``).  A
        fused block computing in fp32 still materialises constants in S when
        the code generator emits a broadcast of an S-typed constant.
    rounding : str
        Rounding mode of the vector multiply's result.
    scalar_rounding : str
        Mode the scalar unit uses to hold ``s`` in fp32 (``muls``).
    broadcast_rounding : str
        Mode used to materialise ``s`` in ``storage`` (``broadcast``).

    Returns
    -------
    ndarray in ``fmt.container``.
    """
    check_choice("how", how, SCALAR_MUL_CHOICES)
    fmt = get_format(fmt)
    st = fmt if storage is None else get_format(storage, "storage")
    check_rounding(rounding, "rounding")
    check_rounding(scalar_rounding, "scalar_rounding")
    check_rounding(broadcast_rounding, "broadcast_rounding")
    sv = _scalar_value(s)
    if how == "broadcast":
        st_val = float(round_to(sv, st, broadcast_rounding))
    else:
        st_val = float(round_to(sv, FP32, scalar_rounding))
    a = as_values(x)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if fmt == FP32 and rounding == "rne" and a.dtype == np.float32:
            r = a * np.float32(st_val)  # native IEEE fp32 multiply, st_val is an fp32 value
        else:
            p = a.astype(np.float64) * st_val  # exact for <= 26-bit significands
            r = round_to(p, fmt, rounding)
    return to_container(np.asarray(r), fmt)


def fma(a, b, c, *, fmt, rounding: str = "rne"):
    """Fused multiply-add: ``a*b + c`` rounded once to ``fmt``.

    For formats of at most 51 significand bits, :func:`numlab.primitives.fma`
    (the product and the sum exact, one rounding via round-to-odd).  For fp64,
    and for inputs outside the primitives' domain (a finite magnitude of
    ``2**200`` or more, beyond every narrower format's range), the float64
    product ``fl64(a*b)`` (exact for inputs of at most 26 significant bits)
    is added to ``c`` and that sum rounded once (``round_sum2``); a product
    that overflows float64 gives inf.  Returns ``fmt.container``.
    """
    fmt = get_format(fmt)
    check_rounding(rounding, "rounding")
    av, bv, cv = (as_values(t, n) for t, n in ((a, "a"), (b, "b"), (c, "c")))
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt.p <= 51 and all(in_domain(v) for v in (av, bv, cv)):
            return to_container(np.asarray(_exact_fma(av, bv, cv, fmt, rounding)), fmt)
        av, bv, cv = (v.astype(np.float64) for v in (av, bv, cv))
        p = av * bv
    return to_container(np.asarray(round_sum2(p, cv, fmt, rounding)), fmt)


def mul_add(a, b, c, *, fmt, rounding: str = "rne"):
    """Multiply then add: ``fl(fl(a*b) + c)``, two roundings to ``fmt``."""
    fmt = get_format(fmt)
    check_rounding(rounding, "rounding")
    av, bv, cv = (as_values(t, n).astype(np.float64) for t, n in ((a, "a"), (b, "b"), (c, "c")))
    with np.errstate(over="ignore", invalid="ignore"):
        p = round_to(av * bv, fmt, rounding)
    return to_container(np.asarray(round_sum2(p, cv, fmt, rounding)), fmt)


def multiply_add(a, b, c, *, fmt, fused: bool = True, rounding: str = "rne"):
    """``fma`` when ``fused`` else ``mul_add`` (the ``KernelSpec.fma`` switch)."""
    return (fma if fused else mul_add)(a, b, c, fmt=fmt, rounding=rounding)


# --------------------------------------------------------------------------
# the fp32 fast path of fma (the engine's fused multiply-add on float32 arrays)
# --------------------------------------------------------------------------
def _as_f32(x) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype == np.float32 else a.astype(np.float32)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a*b + c`` rounded once to fp32.

    The product of two fp32 values is exact in float64; ``s = fl64(p + c)``
    is then rounded to fp32.  That double rounding can be wrong only when
    ``s`` lies exactly halfway between two fp32 numbers (its 29 low
    significand bits are ``1 0...0``): there the exact error of ``s``
    (Knuth's TwoSum) says on which side the exact value lies (zero: a true
    tie, round to even).  Results in fp32's subnormal range are redone by
    the exact kernel (:func:`fma`).  Works on chunks
    of rows so the float64 temporaries stay in cache."""
    a, b, c = np.broadcast_arrays(_as_f32(a), _as_f32(b), _as_f32(c))
    out = np.empty(a.shape, dtype=np.float32)
    if a.size == 0:
        return out
    if a.ndim == 0:
        return _as_f32(fma(a, b, c, fmt=FP32)).reshape(())
    per_row = max(1, a.size // a.shape[0])
    step = max(1, 65536 // per_row)
    low = np.uint64(0x1FFFFFFF)
    half = np.uint64(0x10000000)
    tiny = 2.0**-126
    # chunk buffers, reused: no fresh allocation per chunk
    shape = (min(step, a.shape[0]),) + a.shape[1:]
    p_buf = np.empty(shape, dtype=np.float64)
    q_buf = np.empty(shape, dtype=np.float64)
    t_buf = np.empty(shape, dtype=np.uint64)
    m_buf = np.empty(shape, dtype=bool)
    compiled = a.ndim == 2  # the one-pass sum/round/flag kernel (numba) takes 2-D chunks
    with np.errstate(all="ignore"):
        for i in range(0, a.shape[0], step):
            sl = slice(i, i + step)
            k = min(step, a.shape[0] - i)
            p, q, t, mid = p_buf[:k], q_buf[:k], t_buf[:k], m_buf[:k]
            np.multiply(a[sl], b[sl], out=p, dtype=np.float64)  # exact
            o = out[sl]
            if compiled and _fma_chunk_compiled(a[sl], b[sl], c[sl], p, o, mid, tiny):
                continue
            compiled = False  # unavailable: numpy from here on
            np.add(p, c[sl], out=p)
            o[...] = p  # numpy's float64 -> float32 cast: RNE
            np.bitwise_and(p.view(np.uint64), low, out=t)
            np.equal(t, half, out=mid)
            if mid.any():
                _settle_midpoints(a[sl], b[sl], c[sl], mid, o)
            np.abs(p, out=q)
            # zeros or fp32 subnormal results (an any(), not a min(): a NaN elsewhere in
            # the chunk must not hide them)
            if (q < tiny).any():
                sub_ = (q < tiny) & (p != 0)
                if sub_.any():  # fp32 subnormal results: exact kernel
                    o[sub_] = _as_f32(fma(a[sl][sub_], b[sl][sub_], c[sl][sub_], fmt=FP32))
    return out


def _settle_midpoints(a, b, c, mid, o) -> None:
    """Where ``mid``: ``fl64(a*b + c)`` fell exactly halfway between two fp32
    numbers, so ``o`` (its RNE cast) may be on the wrong side: the exact error of
    the float64 sum (Knuth's TwoSum; the product is exact) says which side the
    exact value lies on (zero: a true tie, keep the even one)."""
    prod = a[mid].astype(np.float64) * b[mid]  # exact
    sm, e = _two_sum(prod, c[mid].astype(np.float64))  # sm: the float64 sum that was rounded
    r0 = o[mid]
    other = np.nextafter(r0, np.where(sm > r0, np.float32(np.inf), np.float32(-np.inf)))
    up, dn = np.maximum(r0, other), np.minimum(r0, other)
    o[mid] = np.where(e > 0, up, np.where(e < 0, dn, r0))


def _fma_chunk_compiled(a, b, c, p, o, mid, tiny) -> bool:
    """One chunk of :func:`fma_f32` with the compiled pass
    (:func:`numlab.kernels._accel.add_round32`: ``o = RN32(fl64(p + c))`` and the
    fp32-midpoint flags in one pass, the same IEEE operations as the numpy
    steps); ``p`` holds the exact products ``a*b``.  The flagged midpoints and
    the fp32-subnormal results are then settled exactly as on the numpy path,
    recomputing the float64 sum ``fl64(a*b + c)`` where needed.  False (nothing
    settled) when the kernel is unavailable."""
    c = c.view()
    c.flags.writeable = False  # a read-only view (broadcast inputs warn when typed as writeable)
    n = _accel.add_round32(p, c, o, mid)
    if n is None:
        return False
    # |fl64 sum| < 2^-126 implies |RN32(sum)| <= 2^-126 (rounding is monotone):
    # candidates for the numpy path's subnormal test on the float64 sum itself
    # (a NaN elsewhere in the chunk does not hide them)
    cand = np.abs(o) <= tiny
    if not cand.any():
        cand = None
    if n:
        _settle_midpoints(a, b, c, mid, o)
    if cand is not None:
        sm = a[cand].astype(np.float64) * b[cand] + c[cand].astype(np.float64)
        sub_ = (np.abs(sm) < tiny) & (sm != 0)
        if sub_.any():  # fp32 subnormal results: exact kernel
            idx = tuple(ix[sub_] for ix in np.nonzero(cand))
            o[idx] = _as_f32(fma(a[idx], b[idx], c[idx], fmt=FP32))
    return True
