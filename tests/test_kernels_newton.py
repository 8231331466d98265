"""Algorithms: seeds' accuracy, Newton error recurrences, the steps-needed table,
correctly rounded rsqrt/reciprocal/division/exp/tanh/erf/gelu, exp approximation."""

from __future__ import annotations

import math
from fractions import Fraction

import _scalar_orders as R
import ml_dtypes
import mpmath
import numpy as np
import pytest
from _oracles import assert_same_bits

from numlab import kernels as K
from numlab.formats import FP16, FP64, get_format

POS_FP16 = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16)  # all positive finite fp16
POS_BF16 = np.arange(1, 0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16)


def _fp32_sweep(stride=41):
    """fp32 inputs covering every significand (stride) at an even and an odd exponent."""
    sig = np.arange(0, 2**23, stride, dtype=np.int64)
    codes = np.concatenate([sig | (127 << 23), sig | (128 << 23), sig | (100 << 23), sig | (3 << 23)])
    return codes.astype(np.int32).view(np.float32).astype(np.float64)


# ------------------------------------------------------------------ seeds
@pytest.mark.parametrize("func", ["rsqrt", "reciprocal"])
@pytest.mark.parametrize("bits", [4, 8, 12, 14])
def test_table_seed_has_its_correct_bits(bits, func):
    bound = K.seed_error_bound(K.Table(bits), func)
    assert bound < 2.0**-bits
    x = _fp32_sweep()
    y = K.seed_estimate(x, K.Table(bits), func)
    ref = 1 / np.sqrt(x) if func == "rsqrt" else 1 / x
    err = np.abs(y / ref - 1)
    assert err.max() <= bound
    assert err.max() > 0.8 * bound  # the bound is attained (nearly) by some input


def test_magic_seed_error_is_the_known_3_4_percent():
    """Lomont (2003): 0x5f3759df has maximal relative error about 0.03438."""
    b = K.seed_error_bound(K.Magic(), "rsqrt")
    assert 0.0343 < b < 0.0345
    # the sweep + refinement is at least the max over an independent finer sweep
    sig = np.arange(3, 2**23, 5, dtype=np.int64)
    xs = np.concatenate([sig | (127 << 23), sig | (128 << 23)]).astype(np.int32).view(np.float32)
    y = K.seed_estimate(xs, "magic", "rsqrt")
    finer = np.max(np.abs(y * np.sqrt(xs.astype(np.float64)) - 1))
    assert finer - 1e-12 <= b <= finer + 1e-6
    y = K.seed_estimate(np.float32([1.0, 4.0, 2.0]), "magic", "rsqrt")
    # bit pattern check: i = 0x5f3759df - (0x3f800000 >> 1) for x = 1
    assert np.float32(y[0]).view(np.int32) == 0x5F3759DF - (0x3F800000 >> 1)


def test_seed_special_values():
    x = np.array([0.0, -0.0, np.inf, np.nan, -1.0])
    for seed in ("table8", "magic"):
        y = K.seed_estimate(x, seed, "rsqrt")
        assert y[0] == np.inf and y[1] == -np.inf and y[2] == 0 and np.isnan(y[3]) and np.isnan(y[4])
        r = K.seed_estimate(x, seed, "reciprocal")
        assert r[0] == np.inf and r[1] == -np.inf and r[2] == 0 and np.isnan(r[3]) and r[4] < 0


# ------------------------------------------------------------------ recurrences
@pytest.mark.parametrize("func", ["rsqrt", "reciprocal"])
@pytest.mark.parametrize("seed", ["table8", "table12", "table14", "magic"])
def test_newton_step_follows_error_recurrence(seed, func):
    """In fp64 steps: e_{k+1} = -(3/2)e^2 - (1/2)e^3 (rsqrt), -e^2 (reciprocal), up to a few u64."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 8.0, 2000).astype(np.float32).astype(np.float64)
    ref = 1 / np.sqrt(x) if func == "rsqrt" else 1 / x
    e = K.seed_estimate(x, seed, func) / ref - 1
    f = K.rsqrt if func == "rsqrt" else K.reciprocal
    for k in range(1, 3):
        y = f(x, fmt=FP64, algo=K.Newton(seed, k, FP64))
        e_new = y / ref - 1
        pred = np.array([K.newton_recurrence(v, func) for v in e])
        assert np.all(np.abs(e_new - pred) <= 16 * 2.0**-53 + 1e-3 * np.abs(pred))
        assert np.all(np.sign(e_new[np.abs(pred) > 1e-14]) == np.sign(pred[np.abs(pred) > 1e-14]))
        e = e_new


@pytest.mark.parametrize("func", ["rsqrt", "reciprocal"])
def test_newton_in_fp32_is_recurrence_plus_rounding(func):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 8.0, 2000).astype(np.float32).astype(np.float64)
    ref = 1 / np.sqrt(x) if func == "rsqrt" else 1 / x
    e0 = K.seed_estimate(x, "table8", func) / ref - 1
    f = K.rsqrt if func == "rsqrt" else K.reciprocal
    y = f(x, fmt="fp32", algo=K.Newton("table8", 1, "fp32")).astype(np.float64)
    pred = np.array([K.newton_recurrence(v, func) for v in e0])
    # four fp32 roundings in a step, plus the final one: a few u32
    assert np.all(np.abs(y / ref - 1 - pred) <= 6 * 2.0**-24)


STEPS_EXPECTED = {
    # by hand from |e'| <= 1.5 e^2 + 0.5 |e|^3 and the seeds' worst errors e0: a b-bit
    # table has 2^-(b+1.5) < e0 < 2^-(b+1) (asserted below), the bit trick e0 ~ 0.0344
    # (Lomont 2003).  u = 2^-8 (bf16), 2^-11 (fp16, tf32), 2^-24 (fp32).
    # table8:  e0 ~ 2^-9.3 < 2^-8 -> bf16 0; e1 < 1.5*2^-18 < 2^-11 -> fp16/tf32 1;
    #          e1 > 2^-24, e2 < 2^-33 -> fp32 2
    # table12: e0 < 2^-13 < 2^-11 -> 0, 0, 0; e1 < 1.5*2^-26 < 2^-24 -> fp32 1
    # table14: e0 < 2^-15 -> 0, 0, 0; fp32 1
    # magic:   e1 ~ 1.8e-3 = 2^-9.1 -> bf16 1; e2 ~ 4.8e-6 = 2^-17.7 -> fp16/tf32 2;
    #          e3 ~ 3.5e-11 -> fp32 3
    "table8": {"bf16": 0, "fp16": 1, "tf32": 1, "fp32": 2},
    "table12": {"bf16": 0, "fp16": 0, "tf32": 0, "fp32": 1},
    "table14": {"bf16": 0, "fp16": 0, "tf32": 0, "fp32": 1},
    "magic": {"bf16": 1, "fp16": 2, "tf32": 2, "fp32": 3},
}


def test_newton_recurrence_is_the_textbook_one():
    """rsqrt y(3 - x y^2)/2: e -> -(3/2)e^2 - (1/2)e^3; reciprocal y(2 - x y): e -> -e^2."""
    for e in (0.1, -0.03, 2.0**-9, -(2.0**-20)):
        assert K.newton_recurrence(e, "rsqrt") == pytest.approx(-1.5 * e * e - 0.5 * e**3, rel=1e-15)
        assert K.newton_recurrence(e, "reciprocal") == pytest.approx(-e * e, rel=1e-15)


def _worst_inputs(seed):
    """Inputs where the seed's error is largest: every table entry's interval end
    points (both exponent parities) for tables; a sweep's worst 64 inputs plus a
    coarse sweep for the bit trick."""
    seed = K.parse_algo(f"newton({seed},0)").seed
    if isinstance(seed, K.Table):
        b = seed.bits
        idx = np.arange(2**b, dtype=np.float64)
        lo = 1.0 + np.ldexp(idx, -b)
        hi = np.nextafter(1.0 + np.ldexp(idx + 1, -b), 0)
        pts = np.concatenate([lo, hi])
        return np.concatenate([pts, 2 * pts])
    x = _fp32_sweep(stride=7)
    e = np.abs(K.seed_estimate(x, seed) * np.sqrt(x) - 1)
    return np.concatenate([x[np.argsort(e)[-64:]], x[::97]])


def test_steps_table_matches_hand_derivation_and_measurement():
    """The computed table: the fewest steps whose exact-arithmetic error is <= u of the
    format, measured on inputs that include each seed's worst interval end points."""
    table = K.steps_table(("table8", "table12", "table14", "magic"), ("bf16", "fp16", "tf32", "fp32"))
    for seed, row in table.items():
        x = _worst_inputs(seed)
        ref = 1 / np.sqrt(x)
        b = K.seed_error_bound(seed)
        for fmt, k in row.items():
            u = get_format(fmt).u
            assert (b <= u) == (k == 0)
            # exact-arithmetic surrogate: Newton in fp64 (u64 is negligible here)
            y = K.rsqrt(x, fmt=FP64, algo=K.Newton(seed, k, FP64))
            assert np.max(np.abs(y / ref - 1)) <= u
            if k > 0:
                y = K.rsqrt(x, fmt=FP64, algo=K.Newton(seed, k - 1, FP64))
                assert np.max(np.abs(y / ref - 1)) > u, (seed, fmt, k)
    # the hand-derived table, every entry; its premises on the seeds' errors:
    for bits in (8, 12, 14):
        assert 2.0 ** -(bits + 1.5) < K.seed_error_bound(f"table{bits}") < 2.0 ** -(bits + 1)
    assert 0.0343 < K.seed_error_bound("magic") < 0.0345
    assert table == STEPS_EXPECTED


# ------------------------------------------------------------------ correctly rounded
def _rsqrt_correct_fp(xs, fmt):
    """Reference rsqrt rounded to fmt by exact comparisons: y = RN(1/sqrt(x)) iff the
    midpoints around y bracket it, checked as m^2 x vs 1 in Fractions."""
    out = []
    for x in xs:
        fx = Fraction(float(x))
        # start from an fp64 guess and fix by exact midpoint tests
        y = R.round_to_grid(Fraction(1 / math.sqrt(float(x))), fmt)
        out.append(y)
        fy = Fraction(y)
        ulp = Fraction(2) ** (math.frexp(y)[1] - 1 - (R.GRIDS[fmt][0] - 1))
        lo_mid, hi_mid = fy - ulp / 2 if fy != Fraction(2) ** (math.frexp(y)[1] - 1) else fy - ulp / 4, fy + ulp / 2
        assert lo_mid**2 * fx <= 1 <= hi_mid**2 * fx
    return np.array(out)


def test_rsqrt_exact_is_correctly_rounded_fp16_exhaustive():
    x = POS_FP16
    got = K.rsqrt(x, fmt="fp16").astype(np.float64)
    assert K.rsqrt(x, fmt="fp16").dtype == np.float16
    sample = x[:: 97]
    ref = _rsqrt_correct_fp(sample, "fp16")
    assert np.array_equal(got[:: 97], ref)
    # and everywhere: within half an ulp, checked exactly through squares in float64
    # (y and midpoints have 12 bits, so m^2 x is exact in float64)
    y = got
    e = np.frexp(y)[1] - 1
    ulp = np.ldexp(1.0, np.maximum(e, -14) - 10)
    lo = np.where(np.frexp(y)[0] == 0.5, y - ulp / 4, y - ulp / 2)
    hi = y + ulp / 2
    xx = x.astype(np.float64)
    assert np.all(lo * lo * xx <= 1) and np.all(hi * hi * xx >= 1)


def test_rsqrt_sqrt_then_div_two_roundings():
    x = POS_FP16
    two = K.rsqrt(x, fmt="fp16", algo="sqrt_then_div")
    s = np.sqrt(x.astype(np.float64)).astype(np.float16)  # correctly rounded fp16 sqrt
    ref = (1.0 / s.astype(np.float64)).astype(np.float16)
    assert_same_bits(two, ref)
    one = K.rsqrt(x, fmt="fp16")
    assert not np.array_equal(one, two)  # double rounding shows somewhere


def test_reciprocal_and_divide():
    rng = np.random.default_rng(2)
    a = rng.standard_normal(500).astype(np.float32)
    b = rng.standard_normal(500).astype(np.float32)
    for fmt in ("fp32", "fp16", "bf16"):
        d = K.divide(a, b, fmt=fmt).astype(np.float64)
        for ai, bi, di in zip(a[:50], b[:50], d[:50], strict=True):
            assert di == R.round_to_grid(Fraction(float(ai)) / Fraction(float(bi)), fmt)
        r = K.reciprocal(b, fmt=fmt).astype(np.float64)
        assert all(ri == R.round_to_grid(1 / Fraction(float(bi)), fmt) for bi, ri in zip(b[:50], r[:50], strict=True))
        rm = K.divide(a, b, fmt=fmt, algo="recip_mul").astype(np.float64)
        for ai, ri, di in zip(a[:50], r[:50], rm[:50], strict=True):
            assert di == R.round_to_grid(Fraction(float(ai)) * Fraction(ri), fmt)
    # recip_mul differs from true division somewhere (two roundings)
    assert not np.array_equal(K.divide(a, b, fmt="fp32"), K.divide(a, b, fmt="fp32", algo="recip_mul"))
    # Newton division: a * y in fp32
    nd = K.divide(a, b, fmt="fp32", algo="newton(table12,1,fp32)")
    assert np.max(np.abs(nd / (a.astype(np.float64) / b) - 1)) < 2.0**-21


def _mp_round(vals, fmt, fn):
    """Round fn(v), evaluated by mpmath with 120 bits, to fmt (exact Fraction rounding)."""
    with mpmath.workprec(120):
        return np.array([R.round_to_grid(_mpf_to_fraction(fn(mpmath.mpf(float(v)))), fmt) for v in vals])


def _mpf_to_fraction(m):
    m = mpmath.mpf(m)
    man, exp = m.man_exp
    man = -abs(int(man)) if m < 0 else abs(int(man))
    return Fraction(man) * Fraction(2) ** int(exp) if exp >= 0 else Fraction(man, 2 ** int(-exp))


def test_transcendentals_correctly_rounded_on_fp16_samples():
    xs = np.concatenate([POS_FP16[::211], -POS_FP16[::211]])
    xs = xs[np.abs(xs.astype(np.float64)) < 10]
    for name, f, fn in (("exp", K.exp, mpmath.exp), ("tanh", K.tanh, mpmath.tanh), ("erf", K.erf, mpmath.erf)):
        got = f(xs, fmt="fp16").astype(np.float64)
        ref = _mp_round(xs, "fp16", fn)
        assert np.array_equal(got, ref), name
    g = K.gelu(xs, fmt="fp16", approximate="none").astype(np.float64)
    ref = _mp_round(xs, "fp16", lambda v: v / 2 * (1 + mpmath.erf(v / mpmath.sqrt(2))))
    assert np.array_equal(g, ref)
    g = K.gelu(xs, fmt="fp16", approximate="tanh").astype(np.float64)
    c = mpmath.sqrt(2 / mpmath.pi)
    ref = _mp_round(xs, "fp16", lambda v: v / 2 * (1 + mpmath.tanh(c * (v + mpmath.mpf("0.044715") * v**3))))
    assert np.array_equal(g, ref)


def test_gelu_approximations_differ():
    x = POS_FP16[POS_FP16.astype(np.float32) < 6]
    a = K.gelu(-x, fmt="fp16", approximate="none")
    b = K.gelu(-x, fmt="fp16", approximate="tanh")
    assert (a != b).sum() > 10


@pytest.mark.parametrize("degree", [3, 5, 6, 8])
def test_exp_poly_error_within_taylor_remainder(degree):
    """|r| <= ln2/2 after reduction; Taylor remainder <= (ln2/2)^(d+1)/(d+1)! * e^(ln2/2),
    plus the fp32 roundings (Horner: about 2(d+2) u32)."""
    x = np.linspace(-20, 20, 20001).astype(np.float32)
    got = K.exp(x, fmt="fp32", algo=K.ExpPoly(degree)).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    rel = np.abs(got / ref - 1)
    rem = (math.log(2) / 2) ** (degree + 1) / math.factorial(degree + 1) * math.exp(math.log(2) / 2)
    assert rel.max() <= rem * 1.01 + 2 * (degree + 4) * 2.0**-24
    if degree <= 5:
        assert rel.max() > 2.0**-22  # visibly worse than correctly rounded fp32
    exact = K.exp(x, fmt="fp32").astype(np.float64)
    assert np.abs(exact / ref - 1).max() <= 2.0**-24


def test_exp_poly_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, 100.0, -120.0], dtype=np.float32)
    y = K.exp(x, fmt="fp32", algo="exp_poly(6)")
    assert y[0] == np.inf and y[1] == 0 and np.isnan(y[2]) and y[3] == 1 and y[4] == np.inf and y[5] == 0


# ------------------------------------------------------------------ bad input
def test_bad_algorithm_arguments():
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"steps=-1.*>= 0"):
        K.Newton("table8", -1)
    with pytest.raises(ValueError, match=r"steps=-1"):
        K.rsqrt(x, fmt="fp32", algo="newton(table8,-1)")
    with pytest.raises(ValueError, match=r"seed='lut9x'.*table8.*magic"):
        K.Newton("lut9x", 1)
    with pytest.raises(ValueError, match=r"algo='fast'.*exact.*sqrt_then_div.*newton"):
        K.rsqrt(x, fmt="fp32", algo="fast")
    with pytest.raises(ValueError, match=r"algo='sqrt_then_div'"):
        K.reciprocal(x, fmt="fp32", algo="sqrt_then_div")
    with pytest.raises(ValueError, match=r"approximate='gauss'.*none.*tanh"):
        K.gelu(x, fmt="fp32", approximate="gauss")
    with pytest.raises(ValueError, match="bits"):
        K.Table(0)
    with pytest.raises(ValueError, match="degree"):
        K.ExpPoly(0)
    with pytest.raises(ValueError, match=r"^step_fmt='fp7' is not a known format; valid names"):
        K.Newton("table8", 1, "fp7")
    with pytest.raises(ValueError, match=r"^step_fmt='fp7' is not a known format"):
        K.ExpPoly(3, "fp7")
    assert K.parse_algo("newton(table12,2,fp16)") == K.Newton(K.Table(12), 2, FP16)


ALL_FP16 = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
ALL_BF16 = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("name", ["exp", "tanh", "erf"])
def test_transcendentals_correctly_rounded_exhaustive(fmt, name):
    # the reference rounding itself: bf16 of 1 + 2^-8 + 2^-30 is 1 + 2^-7 (not a tie)
    assert nl_round(np.array([1 + 2.0**-8 + 2.0**-30]), "bf16")[0] == 1 + 2.0**-7
    """Every finite input of the format.  Where the float64 value v (error < 4 ulp64)
    is certified (v(1 -+ 2^-49) round alike) the reference is that rounding; the rest
    are decided by mpmath at 120 bits."""
    xs = (ALL_FP16 if fmt == "fp16" else ALL_BF16).astype(np.float32)
    xs = xs[np.isfinite(xs)]
    f = {"exp": K.exp, "tanh": K.tanh, "erf": K.erf}[name]
    got = f(xs, fmt=fmt).astype(np.float64)
    x64 = xs.astype(np.float64)
    with np.errstate(over="ignore"):
        v = {"exp": np.exp, "tanh": np.tanh, "erf": lambda t: np.array([math.erf(a) for a in t])}[name](x64)
        lo = nl_round(v * (1 - 2.0**-49), fmt)
        hi = nl_round(v * (1 + 2.0**-49), fmt)
    cert = (lo == hi) | ~np.isfinite(v)
    assert np.array_equal(got[cert], lo[cert])
    fn = {"exp": mpmath.exp, "tanh": mpmath.tanh, "erf": mpmath.erf}[name]
    rest = np.nonzero(~cert)[0]
    assert rest.size < 200
    if rest.size:
        ref = _mp_round(xs[rest], fmt, fn)
        assert np.array_equal(got[rest], ref)


def nl_round(v, fmt):
    """Round float64 values to fmt, independently of numlab.round_to: numpy's float64 ->
    float16 cast is correctly rounded; ml_dtypes' float64 -> bfloat16 cast goes through
    float32 (double rounding), so for bf16 we first round to float32 *to odd*
    (Boldo-Melquiond: then the float32 -> bfloat16 cast is correct, 24 >= 8 + 2)."""
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if fmt == "fp16":
            return v.astype(np.float16).astype(np.float64)
        r = v.astype(np.float32)
        inexact = (r.astype(np.float64) != v) & np.isfinite(v)
        nb = np.nextafter(r, np.where(v > r, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32))
        odd = (r.view(np.int32) & 1) == 1
        ro = np.where(inexact & ~odd, nb, r).astype(np.float32)
        return ro.astype(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_rsqrt_exact_exhaustive_by_midpoints(fmt):
    """y = RN(1/sqrt(x)) iff the midpoints m- < y < m+ satisfy m-^2 x <= 1 <= m+^2 x
    (and no midpoint equals 1/sqrt(x), impossible: m^2 x = 1 has no solution with
    these bit lengths except powers of 4); m^2 x is exact in float64 (<= 26+11 bits)."""
    x = POS_FP16 if fmt == "fp16" else POS_BF16
    y = K.rsqrt(x, fmt=fmt).astype(np.float64)
    p, emin = (11, -14) if fmt == "fp16" else (8, -126)
    e = np.frexp(y)[1] - 1
    ulp = np.ldexp(1.0, np.maximum(e, emin) - (p - 1))
    lo = np.where(np.frexp(y)[0] == 0.5, y - ulp / 4, y - ulp / 2)
    hi = y + ulp / 2
    xx = x.astype(np.float64)
    fin = np.isfinite(y)
    assert np.all(lo[fin] ** 2 * xx[fin] <= 1) and np.all(hi[fin] ** 2 * xx[fin] >= 1)
