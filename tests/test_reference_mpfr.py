"""numlab's primitives and ``round_to`` against MPFR (optional reference:
``pip install gmpy2``; skipped with the reason when it is absent).

MPFR rounds every operation correctly at any precision; a context with
precision ``p``, the format's exponent range and ``subnormalize=True``
emulates a binary format exactly (MPFR manual, section 5.3, ``mpfr_subnormalize``
-- gmpy2 applies it per operation).  Formats: fp16, bf16, tf32, fp8 e4m3fn and
e5m2, the fnuz fp8 pair, fp6 e2m3/e3m2, fp4 e2m1 and E8M0, each described
here by literal numbers from its specification (IEEE 754, OCP 8-bit FP,
OCP Microscaling v1.0, the fnuz definition), not by numlab's ``Format``.

The MPFR context gets three exponents more than the format at the top, so
that it rounds with an (effectively) unbounded exponent; the overflow rule
of IEEE 754-2019 section 7.4 is then applied here: to nearest (and
stochastic) gives inf, toward zero and to odd give ``max``, up/down give inf
or ``max`` by sign; where the format has no inf "inf" means NaN, and where it
has no NaN either (fp6, fp4) ``max``.  A format without -0 gives +0; E8M0
(unsigned, no zero) gives NaN for negative or zero results and its least
value ``2**-127`` for positive results below it.

Round to odd, which MPFR lacks: the results toward zero (``rz``) and away
from zero (``ra``) bracket the exact value; when they differ the one with the
odd integral significand (``rz / (ra - rz)`` odd) is the result (the sticky
rule of Boldo & Melquiond, computed exactly).  Stochastic rounding must give
``rz`` or ``ra``.

Operations: ``add, sub, mul, div, sqrt, fma`` (every edge pair, and random
operands: values of the format, both signs, zeros, subnormals, max, inf,
NaN); ``round_to`` of random float64 values spread over each format's range.
"""

from __future__ import annotations

import functools
import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from _oracles import same_bits_mask

gmpy2 = pytest.importorskip("gmpy2", reason="gmpy2 (MPFR) is not installed; pip install gmpy2")

import numlab as nl  # noqa: E402
from numlab import primitives as P  # noqa: E402

mpfr = gmpy2.mpfr
ROUNDINGS = ("rne", "rtz", "up", "down", "odd")
GMODE = {"rne": gmpy2.RoundToNearest, "rtz": gmpy2.RoundToZero, "up": gmpy2.RoundUp,
         "down": gmpy2.RoundDown}
HP = gmpy2.context(precision=400, emin=-(1 << 20), emax=1 << 20)  # exact for every case here


class Spec:
    """A format by its specification's numbers: precision ``p`` (with the
    implicit bit), IEEE ``emin``/``emax`` of normal numbers, the largest
    finite value, and which special values exist."""

    def __init__(self, name, p, emin, emax, max_, *, inf=False, nan=True, negzero=True, signed=True,
                 zero=True, subnormals=True, dtype=None):
        self.name, self.p, self.emin, self.emax, self.max = name, p, emin, emax, mpfr(max_)
        self.inf, self.nan, self.negzero, self.signed = inf, nan, negzero, signed
        self.zero, self.subnormals, self.dtype = zero, subnormals, dtype
        self.least = math.ldexp(1.0, emin - p + 1 if subnormals else emin)

    def context(self, mode: str):
        """MPFR context of the format (MPFR exponents: significand in [1/2, 1)),
        three binades more at the top."""
        emin = self.emin - self.p + 2 if self.subnormals else self.emin + 1
        return gmpy2.context(precision=self.p, emin=emin, emax=self.emax + 4,
                             subnormalize=self.subnormals, round=GMODE[mode])


SPECS = [
    Spec("fp16", 11, -14, 15, 65504.0, inf=True, dtype=np.float16),
    Spec("bf16", 8, -126, 127, (2 - 2.0**-7) * 2.0**127, inf=True, dtype=ml_dtypes.bfloat16),
    Spec("tf32", 11, -126, 127, (2 - 2.0**-10) * 2.0**127, inf=True),
    Spec("fp8_e4m3", 4, -6, 8, 448.0, dtype=ml_dtypes.float8_e4m3fn),
    Spec("fp8_e5m2", 3, -14, 15, 57344.0, inf=True, dtype=ml_dtypes.float8_e5m2),
    Spec("fp8_e4m3fnuz", 4, -7, 7, 240.0, negzero=False, dtype=ml_dtypes.float8_e4m3fnuz),
    Spec("fp8_e5m2fnuz", 3, -15, 15, 57344.0, negzero=False, dtype=ml_dtypes.float8_e5m2fnuz),
    Spec("fp6_e2m3", 4, 0, 2, 7.5, nan=False, dtype=ml_dtypes.float6_e2m3fn),
    Spec("fp6_e3m2", 3, -2, 4, 28.0, nan=False, dtype=ml_dtypes.float6_e3m2fn),
    Spec("fp4_e2m1", 2, 0, 2, 6.0, nan=False, dtype=ml_dtypes.float4_e2m1fn),
    Spec("fp8_e8m0", 1, -127, 127, 2.0**127, negzero=False, signed=False, zero=False, subnormals=False,
         dtype=ml_dtypes.float8_e8m0fnu),
]
IDS = [s.name for s in SPECS]


# ---------------------------------------------------------------------------
# the reference
# ---------------------------------------------------------------------------
def _apply(op, args):
    f = {"add": gmpy2.add, "sub": gmpy2.sub, "mul": gmpy2.mul, "div": gmpy2.div,
         "sqrt": gmpy2.sqrt, "fma": gmpy2.fma, "round": lambda x: +x}[op]
    return f(*args)


def _big(spec: Spec, neg: bool, to_inf: bool) -> float:
    if to_inf:
        val = math.inf if spec.inf else math.nan if spec.nan else float(spec.max)
    else:
        val = float(spec.max)
    return -val if neg else val


def _odd(rz, ra):
    """Of two adjacent grid values bracketing an exact value, the one with
    the odd integral significand (the quantum is their distance)."""
    with HP:
        k = rz / (ra - rz)
    assert gmpy2.is_integer(k), (rz, ra)
    return rz if int(k) % 2 else ra


def ref(op, vals, spec: Spec, mode: str, up_choice=None) -> float:
    """MPFR's result of ``op`` on the floats ``vals`` in ``spec``, with the
    rules of the module docstring for what MPFR's context cannot express."""
    with HP:
        args = [mpfr(float(v)) for v in vals]
        exact = _apply(op, args)  # exact (or a 400-bit bracket of an irrational sqrt)
    if gmpy2.is_nan(exact):
        return math.nan
    neg = gmpy2.is_signed(exact)  # sign bit, -0 included
    if not spec.signed and (neg or exact == 0):
        return math.nan
    if mode in ("odd", "stochastic"):
        with spec.context("rtz"):
            rz = _apply(op, args)
        ctx = spec.context("rtz")
        ctx.round = gmpy2.RoundAwayZero
        with ctx:
            ra = _apply(op, args)
        if rz == ra or gmpy2.is_infinite(ra) and gmpy2.is_infinite(exact):
            r = rz if not gmpy2.is_infinite(exact) else exact
        elif mode == "odd":
            r = _odd(rz, ra)
        else:
            r = ra if up_choice else rz
    else:
        with spec.context(mode):
            r = _apply(op, args)
    if gmpy2.is_infinite(exact):  # an exact infinity (inf operand, x / 0)
        if spec.inf:
            return float(exact)
        return _big(spec, neg, True)
    if abs(r) > spec.max:  # overflow (MPFR's own overflow included: its inf or its max)
        to_inf = {"rne": True, "stochastic": True, "rtz": False, "odd": False, "up": not neg, "down": neg}[mode]
        return _big(spec, neg, to_inf)
    if r == 0:
        if not spec.zero and exact != 0:
            return spec.least  # E8M0: positive, below 2**-127
        # the sign of an exact zero sum is the mode's (IEEE 754 section 6.3: -0 in down)
        return -0.0 if gmpy2.is_signed(r) and spec.negzero else 0.0
    return float(r)


def _reference(op, operands, spec, mode, up_choice=None):
    return np.array([ref(op, vs, spec, mode, up_choice) for vs in zip(*operands, strict=True)])


# ---------------------------------------------------------------------------
# operands: values of the format
# ---------------------------------------------------------------------------
@functools.cache
def _grid(spec: Spec) -> np.ndarray:
    """Every finite value of the format (tf32: a sample), as float64."""
    if spec.dtype is not None:
        bits = ml_dtypes.finfo(spec.dtype).bits if spec.dtype not in (np.float16,) else 16
        u = np.uint16 if bits == 16 else np.uint8
        codes = np.arange(1 << bits, dtype=np.int64).astype(u)
        with np.errstate(invalid="ignore"):
            v = codes.view(spec.dtype).astype(np.float64)
        return v[np.isfinite(v)]
    rng = np.random.default_rng(32)  # tf32: float32 patterns with the low 13 bits cleared
    b = rng.integers(0, 2**32, 20_000, dtype=np.uint32) & np.uint32(0xFFFFE000)
    with np.errstate(invalid="ignore"):  # NaN patterns
        v = b.view(np.float32).astype(np.float64)
    return v[np.isfinite(v)]


def _edges(spec: Spec) -> np.ndarray:
    least, normal, mx = spec.least, math.ldexp(1.0, spec.emin), float(spec.max)
    v = [least, 2 * least, normal, 1.0, 1.0 + 2.0 ** (1 - spec.p), 1.5 if spec.p > 1 else 2.0, mx, mx / 2]
    v = [x for x in v if least <= x <= mx]
    x = np.array(v)
    return np.concatenate([x, -x, [0.0, -0.0, np.inf, -np.inf, np.nan]])


def _operands(spec: Spec, op: str, n: int, seed: int):
    k = {"sqrt": 1, "fma": 3}.get(op, 2)
    e = _edges(spec)
    combos = list(itertools.product(e, repeat=k))
    if k == 3:
        combos = combos[::7]
    edge = [np.array(c) for c in zip(*combos, strict=True)]
    rng = np.random.default_rng(seed)
    g = _grid(spec)
    rnd = [rng.choice(g, n) * rng.choice([-1.0, 1.0], n) for _ in range(k)]
    return [np.concatenate([a, b]) for a, b in zip(edge, rnd, strict=True)]


PRIM = {"add": P.add, "sub": P.sub, "mul": P.mul, "div": P.div, "sqrt": P.sqrt, "fma": P.fma}


@pytest.mark.parametrize("op", list(PRIM))
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_primitives_equal_mpfr_every_mode(spec, op):
    operands = _operands(spec, op, n=250, seed=len(op) * 31 + spec.p)
    with np.errstate(invalid="ignore"):  # NaN operands
        args32 = [a.astype(np.float32) for a in operands]  # exact: values of the format
    for k, mode in enumerate(ROUNDINGS):
        exp = _reference(op, operands, spec, mode)
        args = args32 if k % 2 == 0 else operands  # float32 and float64 operands in turn
        with np.errstate(all="ignore"):
            got = PRIM[op](*args, fmt=spec.name, rounding=mode)
        ok = same_bits_mask(np.asarray(got, np.float64), np.asarray(exp, np.float64), nan_equal=True)
        if not ok.all():
            i = np.flatnonzero(~ok)[:5]
            raise AssertionError(f"{op} {spec.name} {mode}: {int((~ok).sum())} of {ok.size} differ; "
                                 f"operands={[a[i] for a in operands]} numlab={np.asarray(got)[i]} mpfr={exp[i]}")
    # stochastic: one of the two MPFR neighbours
    lo = _reference(op, operands, spec, "stochastic", up_choice=False)
    hi = _reference(op, operands, spec, "stochastic", up_choice=True)
    with np.errstate(all="ignore"):
        got = PRIM[op](*args32, fmt=spec.name, rounding="stochastic", rng=np.random.default_rng(1))
    ok = same_bits_mask(np.asarray(got, np.float64), np.asarray(lo, np.float64), nan_equal=True) | same_bits_mask(np.asarray(got, np.float64), np.asarray(hi, np.float64), nan_equal=True)
    assert ok.all(), (op, spec.name, [a[~ok][:5] for a in operands], np.asarray(got)[~ok][:5])


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_round_to_equals_mpfr_every_mode(spec):
    """round_to of float64 values (full 53-bit significands) spread from
    below the least value to above max, and of midpoints of the grid."""
    rng = np.random.default_rng(spec.p * 100 + spec.emax)
    lo, hi = math.log2(spec.least) - 3, math.log2(float(spec.max)) + 2
    n = 1500
    x = rng.uniform(1, 2, n) * np.exp2(np.floor(rng.uniform(lo, hi, n))) * rng.choice([-1.0, 1.0], n)
    g = np.unique(np.abs(_grid(spec)))
    g = g[g >= 0]
    mids = (g[:-1] + g[1:]) / 2
    mids = rng.choice(mids, min(400, mids.size), replace=False)
    x = np.concatenate([x, mids, -mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, float(spec.max) * 1.01, spec.least / 2]])
    for mode in ROUNDINGS:
        exp = _reference("round", [x], spec, mode)
        with np.errstate(all="ignore"):
            got = nl.round_to(x, spec.name, mode)
        ok = same_bits_mask(np.asarray(got, np.float64), np.asarray(exp, np.float64), nan_equal=True)
        assert ok.all(), (spec.name, mode, x[~ok][:5], np.asarray(got)[~ok][:5], exp[~ok][:5])
