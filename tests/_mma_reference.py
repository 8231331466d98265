"""An exact, scalar reference of the matrix-unit algorithm (test-only).

Written from the parameter definitions of :class:`numlab.kernels.mma.MatrixUnit`
(its docstring and the module docstring's steps 1-7), which follow Fasi,
Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores"
(PeerJ Comput. Sci. 7:e330, 2021) and the block-FMA models of Khattak and
Mikaitis ("Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004; public
MATLAB models, github.com/north-numerical-computing/MATLAB-tensor-core,
``models/tools/GEMM.m``).  Nothing here calls the code under test: every value
is a :class:`fractions.Fraction`, one output element at a time, in plain Python
loops; rounding to a format is :func:`tests._exact.round_exact` (itself an
independent Fraction implementation of IEEE 754 rounding); the format
parameters are written out below, not read from :mod:`numlab.formats`.

Only the unit's documented parameters are read (``in_fmt``, ``out_fmt``,
``fma_size``, ``align_bits``, ``carry_bits``, ``align_rounding``,
``final_rounding``, ``subnormals``, ``subnormal_anchor``, ``interleave``,
``join_bits``, ``result_bits``, ``promote_every``), so the reference works on any object that
carries them.

The algorithm for one element ``d = sum_k a_k b_k + c``:

1. K is padded with zeros to a multiple of the block length
   ``L = fma_size * interleave``; ``d`` starts at ``c`` and each block updates
   it (``d <- block(a[blk], b[blk], d)``).
2. Products are exact.  The anchor of a nonzero product is
   ``2**(e_a + e_b)`` with ``e_x = max(floor(log2|x|), emin_in)`` (with
   ``subnormal_anchor="true"``: ``floor(log2|x|)``); the anchor
   of a nonzero accumulator term is ``2**max(floor(log2|c|), -126)``.  Zero
   terms take no part.  ``E`` is the largest anchor.
3. Each term is rounded to an integer multiple of ``u = 2**E / 2**(23 +
   align_bits)`` by ``align_rounding``: ``rtz`` (toward zero), ``down``
   (toward -inf), ``rne`` (nearest, ties to even), or ``sticky`` (toward
   zero, plus ``u/2`` with the term's sign when bits were dropped).
4. The aligned terms are added exactly; with ``carry_bits = cb`` the sum's
   magnitude is reduced modulo ``2**(E + 1 + cb)``.  A sum of magnitude
   ``>= 2**(emax_out + 1)`` is an infinity; otherwise it is rounded by
   ``final_rounding`` to ``result_bits`` (default: out_fmt's precision)
   significand bits with out_fmt's exponent range (IEEE overflow rules of the
   mode), flushing results below ``2**emin_out`` when ``subnormals`` is
   False.
5. ``interleave == 2``: the block's positions ``j`` with ``j mod 4 < 2`` form
   the first sub-vector, summed by steps 2-4 without the accumulator; the
   others are summed with the first result as the accumulator term; that
   result ``r`` joins the running ``d`` by a round-to-nearest-even addition:
   both aligned (step 3, ``sticky``) to ``2**E' / 2**(p_res - 1 +
   join_bits)`` with ``E'`` the larger anchor of ``r`` and ``d``, added, and
   rounded as in step 4 with ``rne``.
6. ``promote_every = N_C``: the unit starts every chunk of ``N_C`` products
   from zero; at the end of each chunk (and after the last block) the chunk
   result is added to an fp32 accumulator (initially ``c``) by an IEEE fp32
   addition (round to nearest even, gradual underflow, IEEE signed zeros); with fp16 output the
   final fp32 value is rounded to fp16 (nearest even).
7. Special values: with ``subnormals`` False, subnormal inputs (and ``c``)
   are first flushed to a zero of the same sign.  NaN in any ``a_k``, ``b_k`` or ``c``, an
   ``inf * 0`` product, or infinities of both signs among the products and
   ``c`` give NaN; otherwise an infinite product or ``c`` gives that infinity.
   Once the running ``d`` is infinite it stays so.

Zeros: an exact zero sum of a block (or of a join, or a block without
nonzero terms) is ``+0.0`` (numlab.kernels.mma documents it); a nonzero sum
that rounds to zero keeps its sign (IEEE); the fp32 promotion additions
follow IEEE 754 section 6.3 (``-0`` only for ``(-0) + (-0)``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

from _oracles import round_exact

# name -> (precision p incl. the implicit bit, emin, emax, has inf, NaN encoding)
FORMATS = {
    "fp8_e4m3": (4, -6, 8, False, "extended"),  # OCP e4m3fn: max 448, no inf
    "fp8_e5m2": (3, -14, 15, True, "ieee"),
    "fp16": (11, -14, 15, True, "ieee"),
    "bf16": (8, -126, 127, True, "ieee"),
    "tf32": (11, -126, 127, True, "ieee"),
    "fp32": (24, -126, 127, True, "ieee"),
}

ACC_EMIN = -126
"""Exponent clamp of an accumulator term's anchor (fp32's emin)."""
ALIGN_FRACTION_BITS = 23
"""Fraction bits of the alignment window before ``align_bits``."""


def fmt(name: str, p: int | None = None) -> SimpleNamespace:
    """A format record for :func:`round_exact` (``p`` overrides the precision)."""
    p0, emin, emax, inf, nan = FORMATS[name]
    return SimpleNamespace(name=name, p=p0 if p is None else p, emin=emin, emax=emax, inf=inf, nan=nan,
                           subnormals=True)


def floor_log2(x: Fraction) -> int:
    """floor(log2 |x|) for x != 0, exactly."""
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    return e


def pow2(e: int) -> Fraction:
    return Fraction(2) ** e


def _align(t: Fraction, u: Fraction, how: str) -> Fraction:
    """``t`` rounded to a multiple of ``u`` (``sticky``: of ``u/2``, see the module docstring)."""
    q = t / u
    if how in ("rtz", "sticky"):
        n = math.trunc(q)
        r = n * u
        if how == "sticky" and n != q:
            r += (u / 2) if t > 0 else -(u / 2)
        return r
    if how == "down":
        return math.floor(q) * u
    if how == "rne":
        return round(q) * u  # Fraction.__round__: ties to even
    raise AssertionError(how)


def _to_result(s: Fraction, unit, rounding: str) -> float:
    """Step 4's overflow test and rounding of an exact sum to the result format."""
    name = unit.out_fmt
    f = fmt(name, unit.result_bits)
    if s == 0:
        return 0.0
    if abs(s) >= pow2(f.emax + 1):
        return math.copysign(math.inf, s)
    return round_exact(s, f, rounding, ftz=not unit.subnormals)


def block_fma(prods, c, unit, in_emin: int) -> float:
    """One block: ``prods`` = [(a_k, b_k)] (Fractions), ``c`` a float (may be inf/0)."""
    if math.isinf(c):
        return c
    terms = []  # (value, anchor)
    for a, b in prods:
        if a != 0 and b != 0:
            ea = max(floor_log2(a), in_emin)
            eb = max(floor_log2(b), in_emin)
            terms.append((a * b, pow2(ea + eb)))
    cf = Fraction(c)
    if cf != 0:
        terms.append((cf, pow2(max(floor_log2(cf), ACC_EMIN))))
    if not terms:
        return 0.0
    E = max(anc for _, anc in terms)
    u = E / pow2(ALIGN_FRACTION_BITS + unit.align_bits)
    s = sum((_align(t, u, unit.align_rounding) for t, _ in terms), Fraction(0))
    if unit.carry_bits is not None:
        m = E * pow2(1 + unit.carry_bits)
        s = (abs(s) % m) * (1 if s >= 0 else -1)
    return _to_result(s, unit, unit.final_rounding)


def join(r: float, d: float, unit) -> float:
    """Step 5's round-to-nearest-even addition of an interleaved block result ``r`` to ``d``."""
    if math.isinf(d):
        return d
    if math.isinf(r):
        return r
    vals = [Fraction(x) for x in (r, d) if x != 0]
    if not vals:
        return 0.0
    E = max(pow2(max(floor_log2(v), ACC_EMIN)) for v in vals)
    p_res = unit.result_bits if unit.result_bits is not None else FORMATS[unit.out_fmt][0]
    u = E / pow2(p_res - 1 + unit.join_bits)
    s = sum((_align(v, u, "sticky") for v in vals), Fraction(0))
    return _to_result(s, unit, "rne")


def _fp32_add(x: float, y: float) -> float:
    """IEEE fp32 addition, round to nearest even (x, y fp32 values or inf/NaN)."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if math.isinf(x) or math.isinf(y):
        if math.isinf(x) and math.isinf(y) and x != y:
            return math.nan
        return x if math.isinf(x) else y
    s = Fraction(x) + Fraction(y)
    if s == 0:  # IEEE 754 6.3: -0 only for (-0) + (-0) in round to nearest
        return -0.0 if math.copysign(1, x) < 0 and math.copysign(1, y) < 0 else 0.0
    return round_exact(s, fmt("fp32"), "rne")


def _flush(x: float, name: str) -> float:
    p, emin, *_ = FORMATS[name]
    # flush to a zero of the same sign (FTZ/DAZ)
    return math.copysign(0.0, x) if (math.isfinite(x) and abs(x) < 2.0**emin) else x


def _special(a_row, b_col, c: float):
    """Step 7: the special result, or None when every value is finite."""
    nan = math.isnan(c)
    pinf, ninf = c == math.inf, c == -math.inf
    for a, b in zip(a_row, b_col, strict=True):
        if math.isnan(a) or math.isnan(b):
            nan = True
        elif math.isinf(a) or math.isinf(b):
            if a == 0 or b == 0:
                nan = True
            elif (a > 0) == (b > 0):
                pinf = True
            else:
                ninf = True
    if nan or (pinf and ninf):
        return math.nan
    if pinf:
        return math.inf
    if ninf:
        return -math.inf
    return None


def mma_element(a_row, b_col, c: float, unit) -> float:
    """``d = sum_k a_row[k] b_col[k] + c`` on ``unit`` (Python floats in, a Python float out)."""
    a_row, b_col = [float(x) for x in a_row], [float(x) for x in b_col]
    c = float(c)
    if not unit.subnormals:
        a_row = [_flush(x, unit.in_fmt) for x in a_row]
        b_col = [_flush(x, unit.in_fmt) for x in b_col]
        c = _flush(c, unit.out_fmt)
    sp = _special(a_row, b_col, c)
    if sp is not None:
        return sp
    # subnormal_anchor='true': no floor (true exponents)
    in_emin = FORMATS[unit.in_fmt][1] if unit.subnormal_anchor == "clamped" else -100_000
    L = unit.fma_size * unit.interleave
    K = len(a_row)
    Kp = -(-K // L) * L
    a = [Fraction(x) for x in a_row] + [Fraction(0)] * (Kp - K)
    b = [Fraction(x) for x in b_col] + [Fraction(0)] * (Kp - K)
    promote = unit.promote_every
    acc = c
    d = 0.0 if promote is not None else c
    for k0 in range(0, Kp, L):
        prods = list(zip(a[k0:k0 + L], b[k0:k0 + L], strict=True))
        if math.isinf(d):
            pass  # an infinite running value stays
        elif unit.interleave == 1:
            d = block_fma(prods, d, unit, in_emin)
        else:
            first = [pr for j, pr in enumerate(prods) if j % 4 < 2]
            second = [pr for j, pr in enumerate(prods) if j % 4 >= 2]
            r1 = block_fma(first, 0.0, unit, in_emin)
            r2 = block_fma(second, r1, unit, in_emin)
            d = join(r2, d, unit)
        if promote is not None and (k0 + L) % promote == 0:
            acc, d = _fp32_add(acc, d), 0.0
    if promote is not None:
        d = _fp32_add(acc, d)
        if unit.out_fmt == "fp16" and math.isfinite(d):
            d = round_exact(Fraction(d), fmt("fp16"), "rne") if d != 0 else d
    return d


def mma_reference(a, b, unit, c=None) -> list[list[float]]:
    """``D = A B + C`` element by element (nested lists of Python floats)."""
    M, K = len(a), len(a[0]) if len(a) else 0
    N = len(b[0]) if len(b) else 0
    cols = [[float(b[k][j]) for k in range(K)] for j in range(N)]
    return [[mma_element([float(x) for x in a[i]], cols[j], 0.0 if c is None else float(c[i][j]), unit)
             for j in range(N)] for i in range(M)]
