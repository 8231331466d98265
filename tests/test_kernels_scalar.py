"""Instruction choice: muls vs broadcast (exhaustive over fp16), per-unit rounding
modes, FMA vs multiply-then-add, all against independent references."""

from __future__ import annotations

import math
from fractions import Fraction

import _scalar_orders as R
import ml_dtypes
import numpy as np
import pytest
from _oracles import assert_same_bits, same_bits
from hypothesis import given
from hypothesis import strategies as st

from numlab import kernels as K
from numlab import primitives
from numlab.kernels._common import Arith


def _all_finite(dtype, bits=16):
    codes = np.arange(2**bits, dtype=np.uint32).astype(np.uint16 if bits == 16 else np.uint8)
    v = codes.view(dtype)
    return v[np.isfinite(v.astype(np.float32))]


FP16_ALL = _all_finite(np.float16)
BF16_ALL = _all_finite(ml_dtypes.bfloat16)

REPRESENTABLE = [0.5, 0.125, 3.0, 2.0**-10, -1.5, 1.0, 2.0**-24, 1024.0]
NOT_REPRESENTABLE = [0.1, 1 / 3, 0.044715, 1 / math.sqrt(128), 1 + 2.0**-12, 0.7978845608028654, -2.0 / 3]


@pytest.mark.parametrize("s", REPRESENTABLE + NOT_REPRESENTABLE)
def test_muls_and_broadcast_differ_exactly_when_s_not_in_storage(s):
    x = FP16_ALL
    m = K.scalar_mul(x, s, fmt="fp16", how="muls")
    b = K.scalar_mul(x, s, fmt="fp16", how="broadcast")
    assert m.dtype == np.float16 and b.dtype == np.float16
    # independent references: numpy casts (float64 -> float16 is correctly rounded)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        ref_b = (x64 * float(np.float16(s))).astype(np.float16)
        ref_m = (x64 * float(np.float32(s))).astype(np.float16)
    assert_same_bits(b, ref_b)
    assert_same_bits(m, ref_m)
    same = same_bits(m, b)
    s16, s32 = float(np.float16(s)), float(np.float32(s))
    if s16 == s32:  # in particular s representable in S: the two units hold the same scalar
        assert same
    elif math.frexp(s16)[0] in (0.5, -0.5):
        # s_S is a power of two: x * s_S lies on the S grid and x * s_32 is within
        # half an ulp of it (|s_32 - s_S| < ulp(s_S)/2), so both round to x * s_S
        assert same
    else:
        assert not same, s


@pytest.mark.parametrize("s", [0.1, 1 / 3, 0.0884])
def test_bf16_storage_muls_vs_broadcast(s):
    x = BF16_ALL
    m = K.scalar_mul(x, s, fmt="bf16", how="muls")
    b = K.scalar_mul(x, s, fmt="bf16", how="broadcast")
    assert m.dtype == ml_dtypes.bfloat16
    assert not same_bits(m, b)
    assert float(ml_dtypes.bfloat16(s)) != s
    # every result is one of the two neighbours of the exact product x*s (faithful)
    for r in (m, b):
        ex = x.astype(np.float64) * s
        err = np.abs(r.astype(np.float64) - ex)
        finite = np.isfinite(r.astype(np.float64)) & (np.abs(ex) < 1e38)
        assert np.all(err[finite] <= np.abs(ex[finite]) * 2.0**-7 * 1.01 + 2.0**-133)


def test_fused_block_broadcast_keeps_storage_constant_but_fp32_product():
    """Inside a fused block (fmt=fp32) the broadcast constant is still an S value."""
    x = np.float32([1.0, 3.0, 7.0])
    r = K.scalar_mul(x, 0.1, fmt="fp32", how="broadcast", storage="fp16")
    assert r.dtype == np.float32
    assert np.array_equal(r, x * np.float32(np.float16(0.1)))
    r2 = K.scalar_mul(x, 0.1, fmt="fp32", how="muls", storage="fp16")
    assert np.array_equal(r2, x * np.float32(0.1))


@pytest.mark.parametrize("rounding", ["rne", "rtz"])
@pytest.mark.parametrize("scalar_rounding", ["rne", "rtz"])
def test_each_unit_has_its_rounding_mode(rounding, scalar_rounding):
    rng = np.random.default_rng(0)
    x = FP16_ALL[rng.integers(0, FP16_ALL.size, 300)]
    x = x[np.abs(x.astype(np.float64)) < 1e4]
    s = 0.1
    r = K.scalar_mul(x, s, fmt="fp16", how="muls", rounding=rounding, scalar_rounding=scalar_rounding)
    s32 = R.round_to_grid(Fraction(s), "fp32", scalar_rounding)
    for xi, ri in zip(x, r, strict=True):
        exp = R.round_to_grid(Fraction(float(xi)) * Fraction(s32), "fp16", rounding)
        assert float(ri) == exp
    # the scalar's own mode matters: 0.1 rne in fp32 rounds up, rtz down
    assert R.round_to_grid(Fraction(0.1), "fp32", "rne") != R.round_to_grid(Fraction(0.1), "fp32", "rtz")


def test_fma_one_rounding_vs_mul_add_two():
    a = np.float32(1 + 2.0**-23)
    c = np.float32(-(1 + 2.0**-22))
    # a*a = 1 + 2^-22 + 2^-46: FMA keeps the 2^-46, multiply-then-add loses it
    assert K.fma(a, a, c, fmt="fp32") == np.float32(2.0**-46)
    assert K.mul_add(a, a, c, fmt="fp32") == 0.0
    assert K.multiply_add(a, a, c, fmt="fp32", fused=True) == np.float32(2.0**-46)
    assert K.multiply_add(a, a, c, fmt="fp32", fused=False) == 0.0


FP32S = st.floats(-(2.0**60), 2.0**60, width=32, allow_subnormal=True)


@given(a=FP32S, b=FP32S, c=FP32S)
def test_fma_and_mul_add_against_fraction(a, b, c):
    fa, fb, fc = Fraction(a), Fraction(b), Fraction(c)
    exp_fma = R.round_to_grid(fa * fb + fc, "fp32") if fa * fb + fc != 0 else 0.0
    got = float(K.fma(np.float32(a), np.float32(b), np.float32(c), fmt="fp32"))
    assert got == exp_fma
    p = R.round_to_grid(fa * fb, "fp32") if fa * fb != 0 else 0.0
    exp_ma = R.round_to_grid(Fraction(p) + fc, "fp32") if Fraction(p) + fc != 0 else 0.0
    assert float(K.mul_add(np.float32(a), np.float32(b), np.float32(c), fmt="fp32")) == exp_ma
    # fp16 result: one rounding straight from the exact value (no fp32 detour)
    exp16 = R.round_to_grid(fa * fb + fc, "fp16") if fa * fb + fc != 0 else 0.0
    assert float(K.fma(np.float32(a), np.float32(b), np.float32(c), fmt="fp16")) == exp16


def test_bad_scalar_mul_arguments():
    x = np.ones(3, np.float16)
    with pytest.raises(ValueError, match=r"how='vector'.*muls.*broadcast"):
        K.scalar_mul(x, 0.5, fmt="fp16", how="vector")
    with pytest.raises(ValueError, match=r"^rounding='nearest' is not a rounding mode; valid modes: \['rne', 'rtz'"):
        K.scalar_mul(x, 0.5, fmt="fp16", rounding="nearest")
    with pytest.raises(ValueError, match=r"^scalar_rounding='half' is not a rounding mode"):
        K.scalar_mul(x, 0.5, fmt="fp16", scalar_rounding="half")
    with pytest.raises(ValueError, match=r"^storage='fp9' is not a known format"):
        K.scalar_mul(x, 0.5, fmt="fp32", storage="fp9")
    with pytest.raises(ValueError, match="scalar"):
        K.scalar_mul(x, np.ones(2), fmt="fp16")
    with pytest.raises(ValueError, match="fmt"):
        K.scalar_mul(x, 0.5, fmt="fp13")


@pytest.mark.parametrize("rounding", ["rne", "rtz", "up", "down", "odd"])
def test_exact_zero_sums_have_the_ieee_sign(rounding):
    """IEEE 754-2019 section 6.3: an exact zero sum is +0 except under
    roundTowardNegative (-0); x + x = x for zeros.  The kernels' directed
    adds (round_sum2) must agree with the primitives' exactly rounded add."""
    a = np.array([1.0, -1.0, 0.0, -0.0, 0.0, -0.0, 2.5, 0.0])
    b = np.array([-1.0, 1.0, 0.0, -0.0, -0.0, 0.0, -2.5, 0.0])
    got = np.asarray(Arith("fp16", rounding).add(a, b), dtype=np.float64)
    want = np.asarray(primitives.add(a, b, "fp16", rounding), dtype=np.float64)
    assert np.all(got == 0)
    neg = rounding == "down"
    expected_sign = np.array([neg, neg, False, True, neg, neg, neg, False])
    assert np.array_equal(np.signbit(got), expected_sign), (rounding, np.signbit(got))
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_fma_outside_the_primitives_domain_takes_the_float64_path():
    """Finite inputs of magnitude >= 2**200 (beyond every narrow format) are not
    refused: their float64 product is rounded with the sum (hand-derived values)."""
    assert np.isinf(K.fma([1e300], [1e300], [1.0], fmt="fp32")[0])
    assert K.fma([2.0**210], [2.0**-210], [1.0], fmt="fp16")[0] == 2.0  # exact product 1
    assert K.fma([2.0**-210], [2.0**210], [2.0**-12], fmt="fp16")[0] == 1.0  # 1 + 2**-12 -> RNE 1
