"""Exactly rounded primitives against exact rational results (fractions.Fraction)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from _oracles import round_exact

import numlab as nl
from numlab import primitives as P
from numlab.formats import Format

ROUNDINGS = ("rne", "rtz", "up", "down", "odd")
C5 = Format("c5", p=5, emax=10)


def _values(fmt, n, seed, wdt=np.float32):
    """Random finite values of fmt (random fp32 patterns rounded into fmt,
    plus zeros, smallest subnormals and max)."""
    rng = np.random.default_rng(seed)
    e = rng.uniform(math.log2(fmt.smallest_subnormal), math.log2(fmt.max), n)
    x = np.sign(rng.uniform(-1, 1, n)) * 2.0**e
    x = nl.round_to(x.astype(wdt), fmt, "rtz")
    x[:6] = [0.0, -0.0, fmt.smallest_subnormal, -fmt.max, fmt.max, 1.0]
    return rng.permutation(x)


def _sqrt_fraction(v: Fraction, bits: int = 400) -> Fraction:
    """sqrt(v) if v is a square of a dyadic, else a dyadic strictly inside a
    2**-bits-wide bracket of the irrational sqrt (never a grid point or a
    midpoint of any format here: its numerator is odd and its denominator is
    larger)."""
    n, d = v.numerator, v.denominator  # d is a power of two
    if d.bit_length() % 2 == 0:  # make d an even power of two
        n, d = 2 * n, 2 * d
    rn, rd = math.isqrt(n), math.isqrt(d)
    if rn * rn == n:
        return Fraction(rn, rd)
    s = math.isqrt(n << (2 * bits))
    return Fraction(2 * s + 1, rd << (bits + 1))


def _ref(op, args, fmt, mode, **kw):
    out = []
    for vals in zip(*[np.asarray(a, dtype=np.float64).ravel() for a in args], strict=True):
        fr = [Fraction(float(v)) for v in vals]
        if op == "add":
            t = fr[0] + fr[1]
        elif op == "sub":
            t = fr[0] - fr[1]
        elif op == "mul":
            t = fr[0] * fr[1]
        elif op == "div":
            t = fr[0] / fr[1]
        elif op == "sqrt":
            t = _sqrt_fraction(fr[0])
        elif op == "fma":
            t = fr[0] * fr[1] + fr[2]
        elif op == "sum3":
            t = fr[0] + fr[1] + fr[2]
        if t == 0:  # signed zero rules are tested separately
            out.append(math.nan)
        else:
            out.append(round_exact(t, fmt, mode, **kw))
    return np.array(out)


def _check(got, exp, what):
    got = np.asarray(got, dtype=np.float64)
    ok = np.isnan(exp) | (got == exp) | (np.isinf(got) & (got == exp))
    assert ok.all(), f"{what}: {int((~ok).sum())} wrong, e.g. got {got[~ok][:4]} expected {exp[~ok][:4]}"


FMTS = [nl.FP16, nl.BF16, nl.FP8_E4M3, C5]


@pytest.mark.parametrize("fmt", FMTS, ids=str)
def test_binary_ops_vs_fractions(fmt):
    n = 400
    a, b = _values(fmt, n, 1), _values(fmt, n, 2)
    for op in ("add", "sub", "mul", "div"):
        bb = np.where(b == 0, 1.0, b).astype(np.float32) if op == "div" else b
        for mode in ROUNDINGS:
            got = getattr(P, op)(a, bb, fmt, mode)
            assert got.dtype == np.float32
            _check(got, _ref(op, (a, bb), fmt, mode), f"{fmt} {op} {mode}")
        _check(getattr(P, op)(a, bb, fmt, "rne", saturate=True),
               _ref(op, (a, bb), fmt, "rne", saturate=True), f"{fmt} {op} saturate")


@pytest.mark.parametrize("fmt", FMTS, ids=str)
def test_sqrt_fma_sum3_vs_fractions(fmt):
    n = 300
    a, b, c = _values(fmt, n, 3), _values(fmt, n, 4), _values(fmt, n, 5)
    for mode in ROUNDINGS:
        _check(P.sqrt(np.abs(a), fmt, mode), _ref("sqrt", (np.abs(a),), fmt, mode), f"{fmt} sqrt {mode}")
        _check(P.fma(a, b, c, fmt, mode), _ref("fma", (a, b, c), fmt, mode), f"{fmt} fma {mode}")
        _check(P.sum3(a, b, c, fmt, mode), _ref("sum3", (a, b, c), fmt, mode), f"{fmt} sum3 {mode}")


def test_cancellation_heavy_fma_and_sum3():
    """Inputs built so that a*b + c and a + b + c cancel to a few bits, with
    tiny tails -- where round-to-odd bracketing matters most."""
    rng = np.random.default_rng(9)
    n = 400
    a = nl.round_to(rng.uniform(1, 2, n), "fp16")
    b = nl.round_to(rng.uniform(1, 2, n), "fp16")
    c = -nl.round_to(a * b, "fp16", "rtz") + nl.round_to(rng.normal(0, 2.0**-12, n), "fp16")
    big = nl.round_to(rng.uniform(1, 2, n) * 2.0**20, "bf16")
    tiny = nl.round_to(rng.uniform(-1, 1, n) * 2.0**-100, "bf16")
    for mode in ROUNDINGS:
        _check(P.fma(a, b, c, "fp16", mode), _ref("fma", (a, b, c), nl.FP16, mode), f"fma {mode}")
        _check(P.sum3(big, -big, tiny, "bf16", mode), _ref("sum3", (big, -big, tiny), nl.BF16, mode), "sum3")
        _check(P.sum3(big, tiny, -big, "bf16", mode), _ref("sum3", (big, tiny, -big), nl.BF16, mode), "sum3")
        # arbitrary float64 operands (not in the target format)
        x, y, z = rng.normal(size=(3, 200)) * 2.0 ** rng.integers(-30, 30, (3, 200))
        _check(P.fma(x, y, z, "bf16", mode), _ref("fma", (x, y, z), nl.BF16, mode), "fma f64")
        _check(P.div(x, y, "fp16", mode), _ref("div", (x, y), nl.FP16, mode), "div f64")
        _check(P.sqrt(np.abs(x), "fp16", mode), _ref("sqrt", (np.abs(x),), nl.FP16, mode), "sqrt f64")


def test_fma_fp16_double_rounding_regression():
    """The constructed fp16 FMA (FMA_FP16_COUNTEREXAMPLE, hex floats): fp32 FMA
    then fp16 is wrong, the exactly rounded fma is right."""
    ce = P.FMA_FP16_COUNTEREXAMPLE
    a, b, c = ce["a"], ce["b"], ce["c"]
    assert a == float.fromhex("0x1.058p-11") and b == float.fromhex("0x1.f54p-1")
    for v in (a, b, c):
        assert float(np.float16(v)) == v  # all three are fp16 numbers
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    assert exact == 1 + Fraction(1, 2**11) + Fraction(39, 2**31)
    assert round_exact(exact, nl.FP16, "rne") == ce["exact_fp16"] == 1 + 2.0**-10
    fp32_fma = np.float32(round_exact(exact, nl.FP32, "rne"))  # one fp32 rounding = fp32 FMA
    assert fp32_fma == 1 + 2.0**-11  # lands exactly on the fp16 midpoint
    naive = nl.round_to(fp32_fma, "fp16")
    assert naive == ce["naive_fp32_fma_then_fp16"] == 1.0 != ce["exact_fp16"]
    assert P.fma(a, b, c, "fp16") == ce["exact_fp16"]
    assert P.fma(np.float16(a).astype(np.float32), np.float32(b), np.float32(c), "fp16") == ce["exact_fp16"]


def test_figueroa_fp32_is_innocuous_for_fp16_basic_ops():
    """+ - * / sqrt of fp16 numbers computed in fp32 and rounded once to fp16
    (RNE) are correctly rounded (q = 24 >= 2p + 2 = 24), checked against the
    exactly rounded primitives on 20000 random pairs (and those against
    Fraction above); fma through fp32 is not (counterexample above)."""
    rng = np.random.default_rng(11)
    codes = rng.integers(0, 2**16, size=(2, 20000), dtype=np.uint16)
    a, b = codes.view(np.float16).astype(np.float32)
    ok = np.isfinite(a) & np.isfinite(b) & (b != 0)
    a, b = a[ok], b[ok]
    with np.errstate(all="ignore"):
        pairs = {
            "add": (a + b, P.add(a, b)),
            "sub": (a - b, P.sub(a, b)),
            "mul": (a * b, P.mul(a, b)),
            "div": (a / b, P.div(a, b)),
            "sqrt": (np.sqrt(np.abs(a)), P.sqrt(np.abs(a))),
        }
    for op, (fp32, exact) in pairs.items():
        np.testing.assert_array_equal(nl.round_to(fp32, "fp16"), exact, err_msg=op)


def test_dot_vs_fractions():
    rng = np.random.default_rng(12)
    x = nl.round_to(rng.normal(size=(50, 8)) * 4, "fp16")
    y = nl.round_to(rng.normal(size=(50, 8)) * 4, "fp16")
    y[:, 0] = -x[:, 1] * 0 + y[:, 0]
    for mode in ROUNDINGS:
        got = P.dot(x, y, "fp16", mode)
        exp = [round_exact(sum(Fraction(float(u)) * Fraction(float(v)) for u, v in zip(r, s, strict=True)),
                           nl.FP16, mode) for r, s in zip(x, y, strict=True)]
        np.testing.assert_array_equal(got, exp)
    got = P.dot(x.T, y.T, "bf16", "rne", axis=0)
    assert got.shape == (50,)
    assert P.dot(x[0], y[0], "fp16").ndim == 0


def test_signed_zero_and_specials():
    z, nz = 0.0, -0.0
    assert np.signbit(P.add(nz, nz)) and not np.signbit(P.add(z, nz))
    assert np.signbit(P.add(z, nz, rounding="down")) and not np.signbit(P.add(z, z, rounding="down"))
    assert not np.signbit(P.sub(1.5, 1.5)) and np.signbit(P.sub(1.5, 1.5, rounding="down"))
    assert np.signbit(P.mul(nz, 3.0)) and np.signbit(P.sqrt(nz))
    assert np.signbit(P.fma(nz, 1.0, nz)) and not np.signbit(P.fma(1.0, 2.0, -2.0))
    assert np.signbit(P.sum3(1.0, -1.0, 0.0, rounding="down"))
    assert np.signbit(P.mul(-1e-30, 1e-30, "fp16"))  # underflow keeps the sign
    assert P.div(1.0, 0.0, rounding="rtz") == np.inf  # division by zero is exact inf
    assert P.div(-1.0, 0.0) == -np.inf
    assert np.isnan(P.sqrt(-1.0)) and np.isnan(P.add(np.inf, -np.inf)) and np.isnan(P.mul(0.0, np.inf))
    assert P.add(np.inf, 1.0) == np.inf and np.isnan(P.add(np.nan, 1.0))
    assert P.mul(300.0, 300.0, "fp16", "rtz") == 65504.0 and P.mul(300.0, 300.0, "fp16") == np.inf
    assert np.isnan(P.mul(30.0, 30.0, "fp8_e4m3"))
    assert P.mul(30.0, 30.0, "fp8_e4m3", saturate=True) == 448.0
    y = P.add(np.float32(1), np.float32(2 ** -12), "fp16", "stochastic", rng=np.random.default_rng(0))
    assert y in (1.0, 1.0 + 2.0**-10) and isinstance(y, np.float32)


@pytest.mark.parametrize("wdt", [np.float32, np.float64])
def test_div_finite_by_inf_is_signed_zero_in_every_mode_and_format(wdt):
    """IEEE 754-2019 sections 6.1 and 6.3: finite / +-inf is an exact zero whose
    sign is the XOR of the operands' signs, whatever the rounding (it used to
    be NaN: the remainder test computed 0 * inf).  Formats without -0 give +0,
    E8M0 (no zero) NaN; inf/inf and NaN/inf stay NaN."""
    x = np.array([0.0, -0.0, 1.0, -1.0, 3e-30, -448.0, 1e30, -2.0**-149], wdt)
    x = np.concatenate([x, x])
    y = np.array([np.inf] * 8 + [-np.inf] * 8, wdt)
    xor = np.signbit(x) ^ np.signbit(y)
    for fmt in [f for f in nl.FORMATS.values() if f.p <= 51]:
        for mode in (*ROUNDINGS, "stochastic"):
            kw = {"rng": np.random.default_rng(0)} if mode == "stochastic" else {}
            for extra in ({}, {"saturate": True, "ftz": True}):
                q = P.div(x, y, fmt, mode, **kw, **extra)
                assert q.dtype == wdt
                if not fmt.zero:
                    assert np.isnan(q).all(), (fmt, mode)
                    continue
                assert (q == 0).all(), (fmt, mode, q)
                want = xor if fmt.negzero else np.zeros_like(xor)
                np.testing.assert_array_equal(np.signbit(q), want, err_msg=f"{fmt} {mode} {extra}")
    assert np.signbit(P.div(-5.0, np.inf)) and not np.signbit(P.div(-5.0, -np.inf, rounding="down"))
    for a, b in ((np.inf, np.inf), (-np.inf, np.inf), (np.nan, np.inf), (1.0, np.nan)):
        assert np.isnan(P.div(a, b))


def test_stochastic_primitive_probability():
    n = 40000
    a = np.full(n, 1.0, np.float32)
    b = np.full(n, 3 * 2.0**-12, np.float32)  # 0.75 ulp of fp16 at 1 (ulp = 2**-10)
    y = P.add(a, b, "fp16", "stochastic", rng=np.random.default_rng(7))
    up = np.count_nonzero(y == 1 + 2.0**-10)
    assert abs(up - 0.75 * n) <= 5 * math.sqrt(n * 0.75 * 0.25)
    assert np.all((y == 1.0) | (y == 1 + 2.0**-10))


def test_bad_input():
    with pytest.raises(ValueError, match=r"fmt='fp64' has p=53.*need p <= 51"):
        P.add(1.0, 2.0, "fp64")
    with pytest.raises(ValueError, match=r"fmt='fp9' is not a known format; valid names"):
        P.add(1.0, 2.0, "fp9")
    with pytest.raises(ValueError, match=r"rounding='near' is not a rounding mode; valid modes"):
        P.mul(1.0, 2.0, "fp16", "near")
    with pytest.raises(TypeError, match=r"b: x must be a float32 or float64 array.*got dtype int64"):
        P.add(1.0, np.arange(3), "fp16")
    with pytest.raises(ValueError, match=r"a has finite values of magnitude >= 2\*\*200"):
        P.fma(1e300, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"rounding='stochastic' needs rng"):
        P.add(1.0, 2.0, "fp16", "stochastic")


def test_div_sqrt_just_beside_a_grid_point():
    """Quotients and square roots whose fp64 rounding lands exactly on an fp16
    grid point although the exact value is not on it: directed modes need the
    exact remainder's sign (of either sign of the divisor)."""
    g = 1 + 2.0**-10  # an fp16 number; fp16 neighbours 1.0 and 1 + 2**-9
    y = 1 + 3 * 2.0**-52
    x = 1 + 2.0**-10 + 3 * 2.0**-52  # = RN(g * y): x / y = g - 2**-60.4...
    assert x / y == g  # fp64 rounds onto the grid point
    exact = Fraction(x) / Fraction(y)
    assert exact < g
    for sx, sy in ((1, 1), (-1, -1), (1, -1), (-1, 1)):
        for mode in ROUNDINGS:
            exp = round_exact(Fraction(sx * sy) * exact, nl.FP16, mode)
            assert P.div(sx * x, sy * y, "fp16", mode) == exp, (sx, sy, mode)
    a = g * g - 2.0**-52  # sqrt(a) rounds to g in fp64 but is below it
    assert np.sqrt(a) == g
    for mode in ROUNDINGS:
        assert P.sqrt(a, "fp16", mode) == round_exact(_sqrt_fraction(Fraction(a)), nl.FP16, mode)
    assert P.sqrt(a, "fp16", "rtz") == 1.0 and P.div(x, y, "fp16", "rtz") == 1.0


def test_rounding_keyword():
    """Every primitive takes ``rounding=``: up and down differ on inexact cases."""
    args = {"add": (1.0, 2.0**-11), "sub": (1.0, -(2.0**-11)), "mul": (1 + 2.0**-10, 1 + 2.0**-10),
            "div": (1.0, 3.0), "sqrt": (2.0,), "fma": (1 + 2.0**-10, 1 + 2.0**-10, 0.0),
            "sum3": (1.0, 2.0**-11, 2.0**-30), "dot": (np.array([1.0, 2.0**-11]), np.array([1.0, 1.0]))}
    for name, a in args.items():
        f = getattr(P, name)
        up, down = f(*a, rounding="up"), f(*a, rounding="down")
        assert up > down, name  # every case is inexact in fp16
