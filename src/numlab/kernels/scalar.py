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
from ..primitives import fma as _exact_fma
from ..rounding import check_rounding
from ._common import (
    as_values,
    check_choice,
    round_sum2,
    round_to,
    to_container,
)

__all__ = ["scalar_mul", "fma", "mul_add", "multiply_add", "SCALAR_MUL_CHOICES"]

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

    :func:`numlab.primitives.fma` (``a*b`` is exact in float64 for inputs of
    at most 26 significant bits; the sum with ``c`` is made exact by TwoSum
    and rounded once via round-to-odd).  fp64: the float64 sum of that exact
    product is the one rounding.  Returns ``fmt.container``.
    """
    fmt = get_format(fmt)
    check_rounding(rounding, "rounding")
    av, bv, cv = (as_values(t, n) for t, n in ((a, "a"), (b, "b"), (c, "c")))
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt.p <= 51:
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
