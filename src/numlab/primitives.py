"""Exactly rounded arithmetic into a target format.

``add, sub, mul, div, sqrt, fma, sum3, dot`` return the exact mathematical
result of their (float32/float64) arguments rounded *once* into ``fmt`` with
any rounding mode of :data:`numlab.rounding.ROUNDINGS`::

    nl.primitives.fma(a, b, c, fmt="fp16", rounding="rne")

The rule
--------
Rounding an operation first to a wide format and then to the target ("double
rounding") is not always the same as rounding once:

* For ``+ - * / sqrt`` of numbers of a ``p``-bit format, rounding to nearest
  first in a ``q``-bit format and then to nearest in the ``p``-bit one is
  *innocuous* when ``q >= 2p + 2`` (Figueroa, "When is double rounding
  innocuous?", SIGNUM Newsletter 30(3), 1995).  fp32 (q = 24) therefore gives
  correctly rounded fp16/fp8 results (p <= 11) for these five operations,
  and fp64 (q = 53) for every format up to p = 25 (tested in
  tests/test_primitives.py).  This is why a kernel may compute fp16 ``+ * /``
  in fp32 and round once.
* It is *not* innocuous for an FMA or a sum of three or more terms (the exact
  result has up to hundreds of bits), nor for directed modes after a
  round-to-nearest step.  ``fma(a, b, c)`` of fp16 numbers computed as a
  float32 FMA and then rounded to fp16 can be wrong: see
  :data:`FMA_FP16_COUNTEREXAMPLE`.

So every primitive here computes the exact result rounded *to odd* in fp64
and then rounds that into ``fmt`` with :func:`numlab.round_to`.  Round-to-odd
(truncate, and set the last bit when inexact) at precision ``q >= p + 2``
followed by any rounding to precision ``p`` equals the direct rounding of the
exact value (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008,
Theorem 1); here q = 53 and p <= 24.

The fp64 round-to-odd value comes from error-free transformations with plain
fp64 operations (numpy has no FMA): Knuth's TwoSum, Dekker's TwoProduct with
Veltkamp splitting, the exact remainder ``a - q*b`` of a division and
``a - s*s`` of a square root, and for FMA/sum3/dot the exact sign of
``exact - y`` from Shewchuk's Grow-Expansion ("Adaptive precision
floating-point arithmetic", 1997: the sign of a nonoverlapping expansion is
the sign of its largest nonzero component).  These are exact as long as no
fp64 overflow or underflow occurs, which holds for finite inputs of magnitude
below ``2**200`` (every numlab format lies inside fp32's range); larger finite
inputs raise ``ValueError``.

IEEE 754 special cases follow fp64 arithmetic: NaN and inf propagate, x/0 is
±inf, finite/±inf is ±0 with the XOR of the signs in every mode (a format
without -0 gives +0; E8M0, which has no zero, NaN), sqrt of a negative number is NaN, and an exact zero sum has sign +0
except in rounding mode ``"down"`` (-0) unless every term is -0 (section 6.3).
Stochastic rounding rounds the round-to-odd value, whose distance to the
exact value is below 2**-52 relative, so P(round up) is exact to ~1e-15.
"""

from __future__ import annotations

import numpy as np

from .formats import Format, get_format
from .rounding import _as_float_array, check_rounding, round_to

__all__ = ["add", "sub", "mul", "div", "sqrt", "fma", "sum3", "dot", "FMA_FP16_COUNTEREXAMPLE"]

FMA_FP16_COUNTEREXAMPLE = {
    "a": float.fromhex("0x1.058p-11"),  # (1 + 22/1024) * 2**-11, an fp16 number
    "b": float.fromhex("0x1.f54p-1"),  # 1 - 43/2048, an fp16 number
    "c": 1.0,
    # a*b + c = 1 + 2**-11 + 39 * 2**-31 exactly: just above the fp16 midpoint
    # between 1 and 1 + 2**-10, by less than half an fp32 ulp.
    "exact_fp16": float.fromhex("0x1.004p+0"),  # correct: 1 + 2**-10
    "naive_fp32_fma_then_fp16": 1.0,  # fp32 lands on the midpoint, ties to even
}
"""A constructed fp16 FMA where ``round_fp16(fp32_fma(a, b, c))`` is wrong."""

_LIMIT = 2.0**200
_SPLITTER = 134217729.0  # 2**27 + 1 (Veltkamp)


# ---------------------------------------------------------------------------
# error-free transformations (fp64, vectorised)
# ---------------------------------------------------------------------------
def _two_sum(a, b):
    """s + e == a + b exactly, s = fl(a + b) (Knuth, TAOCP vol. 2)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _split(a):
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    """p + e == a * b exactly, p = fl(a * b) (Dekker 1971)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _expansion(terms):
    """Shewchuk's Grow-Expansion of a list of fp64 arrays: a nonoverlapping
    expansion (increasing magnitude, zeros allowed) with the same exact sum."""
    comps: list[np.ndarray] = []
    for t in terms:
        q = t
        new = []
        for c in comps:
            q, h = _two_sum(q, c)
            new.append(h)
        new.append(q)
        comps = new
    return comps


def _sign_of_sum(terms) -> np.ndarray:
    """Exact sign (-1, 0, 1) of the sum of fp64 arrays."""
    comps = _expansion(terms)
    sign = np.zeros(np.broadcast(*comps).shape)
    for c in reversed(comps):
        sign = np.where(sign == 0, np.sign(c), sign)
    return sign


def _odd_select(x0, sign):
    """Round-to-odd value of an exact T with x0 and nextafter(x0, sign)
    bracketing it (T == x0 when sign == 0)."""
    nb = np.nextafter(x0, sign * np.inf)
    odd = (x0.view(np.uint64) & np.uint64(1)) == 1
    return np.where((sign == 0) | odd, x0, nb)


def _rto_of_sum(terms) -> np.ndarray:
    """fp64 round-to-odd of the exact sum of fp64 arrays."""
    comps = _expansion(terms)
    x0 = np.zeros(np.broadcast(*comps).shape)
    for c in comps:  # smallest to largest: within a few ulps of the sum
        x0 = x0 + c
    for _ in range(64):
        s0 = _sign_of_sum([*terms, -x0])
        nb = np.nextafter(x0, s0 * np.inf)
        s1 = _sign_of_sum([*terms, -nb])
        beyond = (s0 != 0) & (s1 == s0)  # T is past nb: move one step
        hit = (s0 != 0) & (s1 == 0)  # T == nb
        x0 = np.where(beyond | hit, nb, x0)
        if not beyond.any():
            s = np.where(hit, 0.0, s0)
            return _odd_select(x0, s)
    raise AssertionError("round-to-odd bracketing did not converge")  # pragma: no cover


# ---------------------------------------------------------------------------
# argument handling
# ---------------------------------------------------------------------------
def in_domain(a) -> bool:
    """Whether every finite value of the float array ``a`` is below ``2**200``
    in magnitude, the domain of the fp64 error-free transformations (a
    float32 or narrower array always is: its values are below 2**128)."""
    if a.dtype.itemsize <= 4 and a.dtype != np.float64:
        return True
    a = a.astype(np.float64, copy=False)
    return not np.any(np.abs(a[np.isfinite(a)]) >= _LIMIT)


def _prep(args, names, fmt, rounding):
    fmt = get_format(fmt)
    if fmt.p > 51:
        raise ValueError(
            f"fmt={fmt.name!r} has p={fmt.p}; primitives round through fp64 round-to-odd and "
            "need p <= 51 (every numlab format except fp64)"
        )
    check_rounding(rounding)
    arrs, dts = [], []
    for name, v in zip(names, args, strict=True):
        try:
            a = _as_float_array(v)
        except TypeError as exc:
            raise TypeError(f"{name}: {exc}") from None
        dts.append(a.dtype)
        if not in_domain(a):
            a64 = a.astype(np.float64)
            raise ValueError(
                f"{name} has finite values of magnitude >= 2**200 (max {np.abs(a64[np.isfinite(a64)]).max():g}); "
                "the fp64 error-free transformations need |x| < 2**200"
            )
        arrs.append(a.astype(np.float64))
    out_dt = np.result_type(*dts)
    scalar = all(np.ndim(v) == 0 for v in args)
    return fmt, arrs, out_dt, scalar


def signed_exact_zero(val, terms, rounding: str):
    """Give the exact zeros of a sum the sign IEEE 754-2019 section 6.3 rules.

    Where ``val`` (the exact sum of ``terms``, or its round-to-odd image) is
    zero: +0 in every rounding mode but ``"down"`` (roundTowardNegative), where it is
    -0; a sum of zeros of one sign keeps that sign (``x + x = x``).  Other
    entries pass through.
    """
    v = np.asarray(val)
    if not np.any(v == 0):  # nothing to sign: the values as np.where below returns them
        return v.astype(np.result_type(v.dtype, np.float64), copy=False)
    all_neg = np.ones(np.shape(val), dtype=bool)
    all_pos = np.ones(np.shape(val), dtype=bool)
    for t in terms:
        all_neg &= (t == 0) & np.signbit(t)
        all_pos &= (t == 0) & ~np.signbit(t)
    sign = -1.0 if rounding == "down" else 1.0
    z = np.where(all_neg, -0.0, np.where(all_pos, 0.0, sign * 0.0))
    return np.where(val == 0, z, val)


def _finish(rto, naive, fmt: Format, rounding, rng, saturate, ftz, out_dt, scalar, zero_terms=None):
    """Round the round-to-odd values; take IEEE special results from fp64."""
    special = ~np.isfinite(naive)
    val = np.where(special, naive, rto)
    if zero_terms is not None:
        val = np.where(special, val, signed_exact_zero(val, zero_terms, rounding))
    with np.errstate(invalid="ignore"):
        out = round_to(val, fmt, rounding, rng=rng, saturate=saturate, ftz=ftz).astype(out_dt)
    return out[()] if scalar else out


def _binary(a, b, fmt, rounding, rng, saturate, ftz, op):
    fmt, (x, y), dt, scalar = _prep((a, b), ("a", "b"), fmt, rounding)
    x, y = np.broadcast_arrays(x, y)
    with np.errstate(all="ignore"):
        naive, rto, zt = op(x, y)
    return _finish(rto, naive, fmt, rounding, rng, saturate, ftz, dt, scalar, zt)


# ---------------------------------------------------------------------------
# the primitives
# ---------------------------------------------------------------------------
_DOC = """
    Parameters
    ----------
    {args} : float32/float64 array_like or float
        Operands (broadcast together), finite values below 2**200 in
        magnitude, or inf/NaN.
    fmt : Format or str
        Target format (p <= 51; default ``"fp16"``).
    rounding : {{"rne", "rtz", "up", "down", "odd", "stochastic"}}
        Rounding rounding of the single rounding into ``fmt``.
    rng, saturate, ftz
        As in :func:`numlab.round_to`.

    Returns
    -------
    ndarray (or scalar)
        float32 if every operand is float32, else float64, holding values of
        ``fmt``: the exact result rounded once (module docstring).
"""


def add(a, b, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):

    def op(x, y):
        s, e = _two_sum(x, y)
        return s, _odd_select(s, np.sign(e)), (x, y)

    return _binary(a, b, fmt, rounding, rng, saturate, ftz, op)


def sub(a, b, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):

    def op(x, y):
        s, e = _two_sum(x, -y)
        return s, _odd_select(s, np.sign(e)), (x, -y)

    return _binary(a, b, fmt, rounding, rng, saturate, ftz, op)


def mul(a, b, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):

    def op(x, y):
        p, e = _two_prod(x, y)
        return p, _odd_select(p, np.sign(e)), None

    return _binary(a, b, fmt, rounding, rng, saturate, ftz, op)


def div(a, b, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):

    def op(x, y):
        q = x / y
        p, e = _two_prod(q, y)
        # sign(x/y - q) = sign(x - q*y) * sign(y); x - p - e is the exact remainder
        s = _sign_of_sum([x, -p, -e]) * np.sign(y)
        # finite / +-inf is an exact +-0 with the XOR sign (IEEE 754-2019
        # sections 6.1, 6.3); the remainder test above gives NaN there (0 * inf)
        rto = np.where(np.isinf(y) & np.isfinite(x), q, _odd_select(q, s))
        return q, rto, None

    return _binary(a, b, fmt, rounding, rng, saturate, ftz, op)


def sqrt(a, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):
    fmt, (x,), dt, scalar = _prep((a,), ("a",), fmt, rounding)
    with np.errstate(all="ignore"):
        r = np.sqrt(x)
        p, e = _two_prod(r, r)
        s = _sign_of_sum([x, -p, -e])  # sign(sqrt(x) - r) = sign(x - r*r)
        rto = _odd_select(r, s)
    return _finish(rto, r, fmt, rounding, rng, saturate, ftz, dt, scalar)


def fma(a, b, c, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):
    """numlab's one fused multiply-add: every kernel's FMA (``kernels.fma``, the
    libm models' ``fma32``, the independent test kernels) calls it."""
    fmt, (x, y, z), dt, scalar = _prep((a, b, c), ("a", "b", "c"), fmt, rounding)
    x, y, z = np.broadcast_arrays(x, y, z)
    with np.errstate(all="ignore"):
        if dt == np.float32:  # float32 operands: the product (<= 48 bits) is exact in fp64
            p, e = x * y, None
        else:
            p, e = _two_prod(x, y)
        naive = p + z
        if e is not None and np.any((e != 0) & np.isfinite(e)):
            rto = _rto_of_sum([p, e, z])
        else:  # every product exact in fp64 (operands of <= 26 bits): TwoSum of two terms
            s, err = _two_sum(p, z)
            rto = _odd_select(s, np.sign(err))
    return _finish(rto, naive, fmt, rounding, rng, saturate, ftz, dt, scalar, (p, z))


def sum3(a, b, c, fmt="fp16", rounding="rne", *, rng=None, saturate=False, ftz=False):
    fmt, (x, y, z), dt, scalar = _prep((a, b, c), ("a", "b", "c"), fmt, rounding)
    x, y, z = np.broadcast_arrays(x, y, z)
    with np.errstate(all="ignore"):
        naive = (x + y) + z
        rto = _rto_of_sum([x, y, z])
    return _finish(rto, naive, fmt, rounding, rng, saturate, ftz, dt, scalar, (x, y, z))


def dot(x, y, fmt="fp16", rounding="rne", *, axis=-1, rng=None, saturate=False, ftz=False):
    """Exactly rounded dot product of short vectors along ``axis``.

    Cost grows as the square of the vector length (a Grow-Expansion of 2n
    terms per dot), so this is meant for n up to a few dozen.
    """
    fmt, (u, v), dt, _ = _prep((x, y), ("x", "y"), fmt, rounding)
    u, v = np.broadcast_arrays(u, v)
    u = np.moveaxis(u, axis, -1)
    v = np.moveaxis(v, axis, -1)
    n = u.shape[-1]
    scalar = u.ndim == 1
    with np.errstate(all="ignore"):
        prods = [_two_prod(u[..., k], v[..., k]) for k in range(n)]
        naive = np.sum(u * v, axis=-1)
        terms = [t for pe in prods for t in pe] or [np.zeros(u.shape[:-1])]
        rto = _rto_of_sum(terms)
    zt = [p for p, _ in prods] or None
    return _finish(rto, naive, fmt, rounding, rng, saturate, ftz, dt, scalar, zt)


for _f, _args, _rule, _how in (
    (add, "a, b", "a + b", "TwoSum gives the exact error; its sign selects the odd neighbour."),
    (sub, "a, b", "a - b", "TwoSum of a and -b, as for add."),
    (mul, "a, b", "a * b", "Dekker's TwoProduct gives the exact error."),
    (div, "a, b", "a / b", "The sign of the exact remainder a - q*b (TwoProduct + Grow-Expansion)."),
    (sqrt, "a", "sqrt(a)", "The sign of the exact residual a - r*r (TwoProduct + Grow-Expansion)."),
    (fma, "a, b, c", "a * b + c (one rounding)",
     "TwoProduct, then the exact sum of three terms rounded to odd by bracketing it between "
     "adjacent fp64 numbers with exact Grow-Expansion sign tests (where every product is "
     "exact, as for operands of at most 26 bits, the TwoSum of the product and c, as for add)."),
    (sum3, "a, b, c", "a + b + c (one rounding)", "As for fma, with the three addends."),
    (dot, "x, y", "sum_k x[k] * y[k] along axis (one rounding)",
     "TwoProduct of every pair, then as for fma with the 2n terms."),
):
    _head = (_f.__doc__ or "").strip()
    _f.__doc__ = (
        f"Exactly rounded ``{_rule}`` in ``fmt``.\n\n"
        + (f"    {_head}\n\n" if _head else "")
        + f"    Method: fp64 round-to-odd value, then one :func:`numlab.round_to`. {_how}\n"
        + _DOC.format(args=_args)
    )
