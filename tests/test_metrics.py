"""Tests of numlab.metrics against independent computations (fractions, scalar
Python loops, numpy.testing's nulp_diff, torch)."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from _oracles import same_bits
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing._private.utils import nulp_diff

from numlab import metrics as M
from numlab.formats import BF16, FP16, FP32, TF32, next_up
from numlab.metrics._inductor import _to_dtype_like_torch


def _all_fp16():
    return np.arange(2**16, dtype=np.uint16).view(np.float16)


# ---------------------------------------------------------------- ordinal / ulp
def test_ordinal_fp16_exhaustive_consecutive():
    v = _all_fp16()
    v = v[~np.isnan(v)]
    v = v[~((v == 0) & np.signbit(v))]  # keep one zero
    o = M.ordinal(v, FP16)
    order = np.argsort(v.astype(np.float64), kind="stable")
    assert np.array_equal(np.diff(o[order]), np.ones(v.size - 1, dtype=np.int64))
    assert M.ordinal(np.float16(0), FP16) == 0 == M.ordinal(-np.float16(0), FP16)
    assert M.ordinal(np.float16(np.inf), FP16) == M.ordinal(np.float16(65504), FP16) + 1


def test_ulp_distance_fp16_matches_numpy_nulp_diff_on_all_code_pairs():
    rng = np.random.default_rng(0)
    v = _all_fp16()
    fin = v[np.isfinite(v)]
    a = rng.choice(fin, 200_000)
    b = rng.choice(fin, 200_000)
    # second half: near neighbours, stepping codes by -3..3 within the same sign
    codes = a[100_000:].view(np.uint16).astype(np.int64)
    step = rng.integers(-3, 4, 100_000)
    mag = np.clip((codes & 0x7FFF) + step, 0, 0x7BFF)
    b[100_000:] = ((codes & 0x8000) | mag).astype(np.uint16).view(np.float16)
    # near zero: cross the sign
    a[-1000:] = rng.choice(fin[np.abs(fin) < 1e-6], 1000)
    b[-1000:] = -a[-1000:]
    ours = M.ulp_distance(a, b, FP16)
    # numpy's nulp_diff subtracts in int16 and wraps for distances >= 2**15,
    # so it is the reference for the near pairs; sign-magnitude codes for all
    near = slice(100_000, None)
    assert np.array_equal(ours[near], nulp_diff(a[near], b[near]).ravel().astype(np.float64))
    ca, cb = a.view(np.uint16).astype(np.int64), b.view(np.uint16).astype(np.int64)
    sa = np.where(ca & 0x8000, -(ca & 0x7FFF), ca)
    sb = np.where(cb & 0x8000, -(cb & 0x7FFF), cb)
    assert np.array_equal(ours, np.abs(sa - sb).astype(np.float64))
    assert ours.max() > 40_000 and np.array_equal(ours[-1000:] == 0, a[-1000:] == 0)


def test_ulp_distance_bf16_and_fp32_vs_sign_magnitude_codes():
    rng = np.random.default_rng(1)
    for dt, fmt, ut, bits in ((ml_dtypes.bfloat16, BF16, np.uint16, 16), (np.float32, FP32, np.uint32, 32)):
        codes = rng.integers(0, 2**bits, 50_000, dtype=np.uint64).astype(ut)
        v = codes.view(dt)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(v.astype(np.float64))
        v, codes = v[ok], codes[ok].astype(np.int64)
        a, ca = v[: v.size // 2 * 2 : 2], codes[: v.size // 2 * 2 : 2]
        b, cb = v[1 : v.size // 2 * 2 : 2], codes[1 : v.size // 2 * 2 : 2]
        sign = np.int64(1) << (bits - 1)

        def signed(c, sign=sign):
            return np.where(c & sign, -(c & (sign - 1)), c & (sign - 1))

        expect = np.abs(signed(ca) - signed(cb)).astype(np.float64)
        assert np.array_equal(M.ulp_distance(a, b, fmt), expect)


def test_ordinal_tf32_next_up_is_plus_one():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(10_000) * 10.0 ** rng.integers(-30, 30, 10_000)
    from numlab.rounding import round_to

    v = round_to(x, TF32)
    o = M.ordinal(v, TF32)
    assert np.array_equal(M.ordinal(next_up(v, TF32), TF32), o + 1)
    tiny = TF32.smallest_subnormal
    assert M.ordinal(tiny, TF32) == 1 and M.ordinal(-tiny, TF32) == -1


def test_ordinal_rejects_nan_and_unrepresentable():
    with pytest.raises(ValueError, match="NaN"):
        M.ordinal(np.array([np.nan]), FP16)
    with pytest.raises(ValueError, match="round first"):
        M.ordinal(np.array([1.0 + 2**-20]), FP16)


def test_ulp_distance_nan_policy_and_rounding_of_reference():
    a = np.array([np.nan, np.nan, 1.0, np.inf, 65504.0, 1.0 + 2**-12])
    b = np.array([np.nan, 1.0, 1.0, np.inf, np.inf, 1.0])
    d = M.ulp_distance(a, b, FP16)
    # 1 + 2**-12 is a tie between 1 and 1 + 2**-10; RNE picks 1 (even)
    assert d.tolist() == [0.0, np.inf, 0.0, 0.0, 1.0, 0.0]
    # crossing zero: -tiny to +tiny is 2 steps
    t = FP16.smallest_subnormal
    assert M.ulp_distance(np.array([-t]), np.array([t]), FP16)[0] == 2


def test_ref_ulp_is_the_spacing_at_the_reference():
    from numlab.formats import Format

    # fp16: spacing 2**(e - 10) in [2**e, 2**(e+1)), 2**-24 below 2**-14; clamped at max; inf/NaN -> ulp(0)
    ref = np.array([1.0, 1.5, 2.0, -3.0, 2.0**-14, 2.0**-20, 0.0, 1e6, -np.inf, np.nan])
    want = [2.0**-10, 2.0**-10, 2.0**-9, 2.0**-9, 2.0**-24, 2.0**-24, 2.0**-24, 2.0**5, 2.0**-24, 2.0**-24]
    assert M.ref_ulp(ref, FP16).tolist() == want
    # without subnormals the numbers below smallest_normal are 0 and +-smallest_normal apart
    nosub = Format("fp16_nosub", 11, 15, subnormals=False, dtype=None, bits=None)
    assert M.ref_ulp(np.array([2.0**-20, 0.0, 1.0]), nosub).tolist() == [2.0**-14, 2.0**-14, 2.0**-10]


def test_ulp_error_fraction_reference():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal(200) * 100
    x = ref.astype(np.float16).astype(np.float64)
    ue = M.ulp_error(ref, x, FP16)
    for r, xx, got in zip(ref, x, ue, strict=True):
        e = math.frexp(abs(r))[1] - 1
        q = Fraction(2) ** (max(e, -14) - 10)
        assert Fraction(got) == pytest.approx(abs(Fraction(xx) - Fraction(r)) / q, rel=1e-15)
        assert got <= 0.5


# ---------------------------------------------------------------- elementwise errors + policy
def test_abs_rel_error_policy():
    ref = np.array([1.0, 0.0, 0.0, np.nan, np.nan, np.inf, np.inf, -np.inf, 2.0, 4.0])
    x = np.array([1.5, 0.0, 1e-300, np.nan, 3.0, np.inf, -np.inf, 5.0, np.inf, 3.0])
    ae = M.abs_error(ref, x)
    re_ = M.rel_error(ref, x)
    assert ae.tolist() == [0.5, 0, 1e-300, 0, np.inf, 0, np.inf, np.inf, np.inf, 1.0]
    assert re_.tolist() == [0.5, 0, np.inf, 0, np.inf, 0, np.inf, np.inf, np.inf, 0.25]
    m = M.nonfinite_masks(ref, x)
    assert m["match"].sum() == 2 and m["mismatch"].sum() == 4 and m["finite"].sum() == 4
    assert np.all(m["match"] ^ m["mismatch"] ^ m["finite"])


def test_rel_error_tiny_floor():
    assert M.rel_error([0.0, 1e-9], [1e-6, 2e-9], tiny=1e-3).tolist() == pytest.approx([1e-3, 1e-6])


def test_percentile_nearest_rank_vs_loop():
    rng = np.random.default_rng(4)
    for n in (1, 2, 7, 100, 1001):
        e = rng.exponential(size=n)
        e[rng.random(n) < 0.05] = np.inf
        s = sorted(e.tolist())
        for q in (50, 99, 100, 0.1):
            k = max(math.ceil(q / 100 * n), 1) - 1
            assert M.percentile(e, q) == s[k]
    assert math.isnan(M.percentile([], 50))


def test_bad_input_errors():
    with pytest.raises(ValueError, match="same shape"):
        M.abs_error(np.zeros(3), np.zeros(4))
    with pytest.raises(TypeError, match="x must be"):
        M.abs_error(np.zeros(2), np.array([True, False]))
    with pytest.raises(ValueError, match="nonfinite"):
        M.rmse([1.0], [1.0], nonfinite="drop")
    with pytest.raises(ValueError, match="rtol"):
        M.error_ratio([1.0], [1.0], rtol=0)


# ---------------------------------------------------------------- bitwise
def test_bitwise_equal_same_and_mixed_dtypes():
    a = np.array([0.0, -0.0, 1.0, np.nan], dtype=np.float16)
    b = np.array([-0.0, -0.0, 1.0, np.nan], dtype=np.float16)
    assert M.bitwise_equal(a, b).tolist() == [False, True, True, True]
    c = np.array([0.0, -0.0, 1.0 + 2**-20, np.nan], dtype=np.float64)
    assert M.bitwise_equal(a, c).tolist() == [True, True, False, True]
    assert M.bitwise_equal_share(a, b) == 0.75


# ---------------------------------------------------------------- aggregates
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=40), st.integers(0, 2**31))
def test_cosine_euclid_rmse_vs_fsum(vals, seed):
    rng = np.random.default_rng(seed)
    ref = np.array(vals)
    x = ref + rng.standard_normal(ref.size)
    dot = math.fsum(float(a) * float(b) for a, b in zip(ref, x, strict=True))
    nr = math.sqrt(math.fsum(float(a) ** 2 for a in ref))
    nx = math.sqrt(math.fsum(float(a) ** 2 for a in x))
    d2 = math.fsum((float(b) - float(a)) ** 2 for a, b in zip(ref, x, strict=True))
    if nr > 0:
        assert M.cosine_similarity(ref, x) == pytest.approx(dot / (nr * nx), rel=1e-9, abs=1e-12)
        assert M.relative_euclidean(ref, x) == pytest.approx(math.sqrt(d2) / nr, rel=1e-12)
    assert M.euclidean(ref, x) == pytest.approx(math.sqrt(d2), rel=1e-12)
    assert M.rmse(ref, x) == pytest.approx(math.sqrt(d2 / ref.size), rel=1e-12)


def test_aggregates_no_overflow_and_zero_cases():
    big = np.array([1e300, 1e300])
    assert M.cosine_similarity(big, big) == pytest.approx(1.0, abs=1e-15)
    assert M.euclidean(big, -big) == pytest.approx(2e300 * math.sqrt(2))
    assert M.cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert math.isnan(M.cosine_similarity(np.zeros(3), np.ones(3)))
    assert M.relative_euclidean(np.zeros(3), np.zeros(3)) == 0.0
    assert M.relative_euclidean(np.zeros(3), np.ones(3)) == math.inf


def test_aggregate_nonfinite_modes():
    ref = np.array([1.0, np.nan, np.inf, 2.0])
    x = np.array([1.0, np.nan, np.inf, 3.0])
    assert math.isnan(M.rmse(ref, x))
    assert M.rmse(ref, x, nonfinite="zero_matching") == pytest.approx(0.5)
    x2 = np.array([1.0, 0.0, np.inf, 3.0])
    assert math.isnan(M.rmse(ref, x2, nonfinite="zero_matching"))
    x3 = np.array([1.0, np.nan, -np.inf, 3.0])
    assert math.isnan(M.cosine_similarity(ref, x3, nonfinite="zero_matching"))


def test_kl_divergence_vs_torch(torch):
    rng = np.random.default_rng(5)
    g = rng.standard_normal((3, 17))
    m = g + 0.1 * rng.standard_normal((3, 17))
    F = torch.nn.functional
    t = F.kl_div(F.log_softmax(torch.tensor(m), dim=-1), F.softmax(torch.tensor(g), dim=-1), reduction="sum").item()
    assert M.kl_divergence(g, m) == pytest.approx(max(t, 0), rel=1e-10)
    assert M.kl_divergence(g, g) == 0.0


def test_kl_divergence_vs_loop():
    g = [0.5, -1.0, 2.0]
    m = [0.4, -0.9, 2.5]
    zg = math.fsum(math.exp(v) for v in g)
    zm = math.fsum(math.exp(v) for v in m)
    kl = math.fsum(math.exp(a) / zg * ((a - math.log(zg)) - (b - math.log(zm))) for a, b in zip(g, m, strict=True))
    assert M.kl_divergence(g, m) == pytest.approx(kl, rel=1e-12)


def test_kl_divergence_nearby_two_point_exact():
    """KL(uniform || softmax([0, delta])) = log cosh(delta/2) = x^2/2 - x^4/12 + ...
    (x = delta/2): for delta = 2**-29 the x^4 term is 2e-38 relative to 5.4e-19,
    so x^2/2 (exact in Fraction) is the value to 1e-19 relative.  The textbook
    sum p (log p - log q) gives 0 or noise here; the stable form must not."""
    delta = 2.0 ** -29
    x = Fraction(delta) / 2
    exact = x * x / 2 - x ** 4 / 12
    got = M.kl_divergence([0.0, 0.0], [0.0, delta])
    assert got > 0
    assert abs(Fraction(got) - exact) / exact < Fraction(1, 10 ** 14)
    # the same pair shifted by a constant and rows batched: KL is shift invariant
    g = np.array([[0.0, 0.0], [5.0, 5.0]])
    m = np.array([[0.0, delta], [7.0, 7.0 + delta * 4]])
    got = M.kl_divergence(g, m)
    y = Fraction(delta * 4) / 2
    exact2 = exact + y * y / 2 - y ** 4 / 12
    assert abs(Fraction(got) - exact2) / exact2 < Fraction(1, 10 ** 9)  # 7.0 + 4 delta rounds: ulp(7)/4delta


@pytest.mark.parametrize("scale, shift", [(1e-9, 0.0), (1e-9, 3.0), (1e-12, -100.0), (1e-3, 0.0),
                                          (0.5, 0.0), (3.0, 1.0), (30.0, 0.0), (300.0, 0.0)])
def test_kl_divergence_vs_mpmath(scale, shift):
    """Against a 60-digit mpmath evaluation of sum p (log p - log q) on the
    same float64 inputs, from 1e-25 (nearby) to 690 (far apart)."""
    mpmath = pytest.importorskip("mpmath", reason="mpmath (a torch dependency) gives the 60-digit reference")
    mpmath.mp.dps = 60
    rng = np.random.default_rng(11)
    g = rng.standard_normal(64)
    m = g + shift + scale * rng.standard_normal(64)
    G = [mpmath.mpf(float(v)) for v in g]
    Mm = [mpmath.mpf(float(v)) for v in m]
    zg = mpmath.fsum(mpmath.exp(v) for v in G)
    zm = mpmath.fsum(mpmath.exp(v) for v in Mm)
    ref = mpmath.fsum(mpmath.exp(a) / zg * ((a - mpmath.log(zg)) - (b - mpmath.log(zm))) for a, b in zip(G, Mm, strict=True))
    got = M.kl_divergence(g, m)
    assert abs(mpmath.mpf(got) - ref) <= 1e-14 * ref, (got, ref)
    for chunk in (64, 7):  # the streaming compare's KL, over chunks
        acc = M.CompareAccumulator("fp32")
        for i in range(0, 64, chunk):
            acc.update(g[i:i + chunk], m[i:i + chunk])
        got = acc.finish()[0]["kl_divergence"]
        assert abs(mpmath.mpf(got) - ref) <= 1e-14 * ref, (chunk, got, ref)


# ---------------------------------------------------------------- msprobe / msit
def _msprobe_rel_loop(ref, x):
    eps = Fraction(np.finfo(np.float64).eps)
    out = []
    for r, v in zip(ref, x, strict=True):
        r, v = Fraction(float(r)), Fraction(float(v))
        if r == 0:
            r, v = r + eps, v + eps
        out.append(abs((v - r) / r))
    return out


def test_error_ratio_vs_fraction_loop():
    rng = np.random.default_rng(6)
    ref = rng.standard_normal(500).astype(np.float16).astype(np.float64)
    ref[:20] = 0.0
    x = ref * (1 + rng.uniform(-0.008, 0.008, 500))
    x[:10] = 0.0
    rel = _msprobe_rel_loop(ref, x)
    for rtol in (1e-3, 5e-3):
        expect = sum(1 for e in rel if e < Fraction(rtol)) / 500
        assert M.error_ratio(ref, x, rtol) == expect
    assert 0.05 < M.error_ratio(ref, x, 1e-3) < M.error_ratio(ref, x, 5e-3) < 1


def test_error_ratio_nonfinite():
    assert M.error_ratio([1.0, np.nan], [1.0, np.nan]) == 1.0
    assert math.isnan(M.error_ratio([1.0, np.nan], [1.0, 2.0]))


@pytest.mark.parametrize(
    "cos,mae,expect",
    [(0.999, 0.5, True), (0.98, 0.0005, True), (0.98, 0.002, False), (0.89, 0.0, False),
     (1.0, 1.5, False), (math.nan, 0.0, False), (0.95, 0.001, True)],
)
def test_msprobe_accuracy_reached(cos, mae, expect):
    assert M.msprobe_accuracy_reached(cos, mae) is expect


def test_msit_errors_vs_loop():
    ref = [0.0, 1.0, -2.0, 4.0]
    x = [0.5, 1.1, -2.0, 3.0]
    rel = [0.0, abs(1.1 / 1.0 - 1), 0.0, 0.25]
    ab = [0.0, abs(1.1 - 1.0), 0.0, 1.0]
    assert M.msit_relative_error(ref, x) == pytest.approx((max(rel), sum(rel) / 4))
    assert M.msit_absolute_error(ref, x) == pytest.approx((max(ab), sum(ab) / 4))


# ---------------------------------------------------------------- inductor rule
def test_inductor_multiplier_table():
    assert M.inductor_multiplier(10**6, True) == 3.0
    assert M.inductor_multiplier(10**6, False) == 2.0
    assert M.inductor_multiplier(999, False) == 3.0
    assert M.inductor_multiplier(10, False, use_larger_multiplier_for_smaller_tensor=True) == 10.0
    assert M.inductor_multiplier(500, False, use_larger_multiplier_for_smaller_tensor=True) == 8.0
    assert M.inductor_multiplier(10**6, False, tol=0.02) == 3.0
    assert M.inductor_multiplier(10**6, False, ndim4_1x1=True) == 3.0
    assert M.inductor_multiplier(5, False, force_max_multiplier=True) == 10.0


def test_inductor_check_agrees_with_torch_same(torch):
    from torch._dynamo.utils import same

    rng = np.random.default_rng(7)
    n_pass = n_fail = 0
    for trial in range(60):
        n = int(rng.choice([8, 300, 2000]))
        dt = [np.float16, np.float32][trial % 2]
        ref64 = rng.standard_normal(n)
        eager = (ref64 + rng.standard_normal(n) * 1e-3).astype(dt)
        scale = float(rng.choice([0.5, 1.5, 2.5, 4.0]))
        comp = (ref64 + rng.standard_normal(n) * 1e-3 * scale).astype(dt)
        kw = {"use_larger_multiplier_for_smaller_tensor": bool(trial % 3 == 0)}
        ours = M.inductor_check(ref64, eager, comp, **kw)
        theirs = same(torch.tensor(eager), torch.tensor(comp), fp64_ref=torch.tensor(ref64),
                      log_error=lambda *a, **k: None, **kw)
        assert ours.passed == bool(theirs), (trial, ours)
        n_pass += ours.passed
        n_fail += not ours.passed
    assert n_pass > 5 and n_fail > 5  # both branches exercised
    # cosine mode
    a = rng.standard_normal(100).astype(np.float32)
    for noise, expect in ((0.05, True), (1.0, False)):
        b = (a + noise * rng.standard_normal(100)).astype(np.float32)
        theirs = same(torch.tensor(a), torch.tensor(b), cos_similarity=True, log_error=lambda *a, **k: None)
        assert M.inductor_check(a.astype(np.float64), a, b, cos_similarity=True).passed == bool(theirs) == expect


def test_nan_corner_cast_matches_torch_to(torch):
    # same()'s nan_corner compares fp64_ref.to(dtype): torch rounds float64 via float32
    import ml_dtypes

    rng = np.random.default_rng(17)
    ties = {np.float16: 2.0**-11, ml_dtypes.bfloat16: 2.0**-8, ml_dtypes.float8_e4m3fn: 2.0**-4}
    tdt = {np.float16: torch.float16, ml_dtypes.bfloat16: torch.bfloat16,
           ml_dtypes.float8_e4m3fn: torch.float8_e4m3fn, np.float32: torch.float32}
    for dt, half_ulp in [*ties.items(), (np.float32, 2.0**-24)]:
        x = np.concatenate([rng.standard_normal(2000), [1 + half_ulp + 2.0**-40, -(1 + half_ulp + 2.0**-40)]])
        ours = _to_dtype_like_torch(x, np.dtype(dt))
        theirs = torch.from_numpy(x).to(tdt[dt]).to(torch.float64).numpy()
        np.testing.assert_array_equal(ours, theirs)
    # the double rounding is real: numpy's one rounding to fp16 gives the other neighbour
    x = np.array([1 + 2.0**-11 + 2.0**-40])
    assert _to_dtype_like_torch(x, np.dtype(np.float16))[0] == 1.0
    assert x.astype(np.float16)[0] == 1 + 2.0**-10


def test_inductor_check_dtype_mismatch_and_allclose():
    a = np.ones(4, np.float16)
    assert M.inductor_check(np.ones(4), a, a.astype(np.float32)).reason == "dtype"
    r = M.inductor_check(np.ones(4), a, a)
    assert r.passed and r.reason == "allclose"


# ---------------------------------------------------------------- bundle
def test_error_stats_bundle():
    rng = np.random.default_rng(8)
    ref = rng.standard_normal((64, 64))
    x = ref.astype(np.float16)
    s = M.error_stats(ref, x, FP16)
    xf = x.astype(np.float64)
    e = np.abs(xf - ref)
    assert s["n"] == 4096 and s["n_finite"] == 4096 and s["nonfinite_mismatch"] == 0
    assert s["abs_max"] == e.max() and s["abs_mean"] == pytest.approx(e.mean())
    assert s["abs_p50"] == sorted(e.ravel())[2047]
    assert s["ulp_max"] == 0.0 and s["ulp0"] == 1.0  # x is ref correctly rounded
    assert s["ulp_err_max"] <= 0.5
    assert s["rel_max"] <= FP16.u * (1 + 1e-12) or (np.abs(ref) < FP16.smallest_normal).any()
    assert s["err_ratio_0.001"] == pytest.approx(np.mean(e / np.abs(ref) < 1e-3))
    x2 = x.copy()
    x2[0, 0] = np.nan
    s2 = M.error_stats(ref, x2, FP16)
    assert s2["nan_x"] == 1 and s2["nonfinite_mismatch"] == 1
    assert s2["abs_max"] == math.inf and s2["ulp_max"] == math.inf and math.isnan(s2["rmse"])
    s0 = M.error_stats(np.zeros(0), np.zeros(0), "fp16")
    assert s0["n"] == 0 and math.isnan(s0["abs_max"])


# --------------------------------------------------------------------------
# the streaming accumulator: the same formulas as the one-shot functions
# --------------------------------------------------------------------------
def _stream_cases():
    rng = np.random.default_rng(20261201)
    n = 2000
    g = rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))
    m = g * (1 + rng.standard_normal(n) * 1e-3)
    g[rng.random(n) < 0.05] = 0.0  # exact zeros on the golden side (msprobe adds eps there)
    m[rng.random(n) < 0.02] = 0.0
    g[:3] = [0.0, 2.0**-60, -(2.0**-55)]  # below / at msit's eps mask
    cases = {"random": (g, m)}
    g2, m2 = g.copy(), m.copy()
    for arr in (g2, m2):  # matching NaN/inf at the same positions
        arr[[10, 20, 30]] = [np.nan, np.inf, -np.inf]
    cases["matching_nonfinite"] = (g2, m2)
    m3 = m2.copy()
    m3[40] = np.nan  # one mismatch
    cases["mismatched_nonfinite"] = (g2, m3)
    small = np.clip(g, -6e4, 6e4), np.clip(m, -6e4, 6e4)
    cases["fp16"] = (small[0].astype(np.float16), small[1].astype(np.float16))
    cases["all_zero_mine"] = (g, np.zeros(n))
    return cases


ELEMENTWISE = ["max_relative_error", "mean_relative_error", "max_absolute_error",
               "mean_absolute_error", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
               "Five Thousandths Err Ratio", "max_ulp_error", "mean_ulp_error",
               "bitwise_equal_ratio", "golden_nan", "golden_inf", "my_nan", "my_inf",
               "nonfinite_mismatch"]
MAX_AND_COUNTS = [c for c in ELEMENTWISE if not c.startswith("mean")]


@pytest.mark.parametrize("case", list(_stream_cases()))
def test_accumulator_one_chunk_equals_one_shot_functions_bitwise(case):
    g, m = _stream_cases()[case]
    cols, notes = M.compare_columns(g, m, "fp16")
    r, y = g.astype(np.float64), m.astype(np.float64)
    masks = M.nonfinite_masks(r, y)
    mismatch = bool(masks["mismatch"].any())
    rz, yz = np.where(masks["match"], 0.0, r), np.where(masks["match"], 0.0, y)
    want = {
        "bitwise_equal_ratio": M.bitwise_equal(g, m).sum() / g.size,
        "golden_nan": int(np.isnan(r).sum()), "golden_inf": int(np.isinf(r).sum()),
        "my_nan": int(np.isnan(y).sum()), "my_inf": int(np.isinf(y).sum()),
        "nonfinite_mismatch": int(masks["mismatch"].sum()),
    }
    if mismatch:  # every error column is NaN, with a note naming the mismatch
        assert all(math.isnan(cols[c]) for c in ELEMENTWISE if c not in want)
        assert "do not match" in " ".join(notes)
    else:
        mp = M.msprobe_relative_error(r, y)
        ue = M.ulp_error(rz, yz, "fp16")
        want.update({
            "max_relative_error": M.msit_relative_error(rz, yz)[0],
            "mean_relative_error": M.msit_relative_error(rz, yz)[1],
            "max_absolute_error": M.msit_absolute_error(rz, yz)[0],
            "mean_absolute_error": M.msit_absolute_error(rz, yz)[1],
            "MaxAbsErr": float(np.max(np.abs(yz - rz))),
            "MaxRelativeErr": float(mp.max()),
            "One Thousandth Err Ratio": M.error_ratio(r, y, 1e-3),
            "Five Thousandths Err Ratio": M.error_ratio(r, y, 5e-3),
            "max_ulp_error": float(ue.max()), "mean_ulp_error": float(ue.mean()),
        })
        # aggregates: metrics' whole-array functions, to rounding
        agg = {"cosine_similarity": M.cosine_similarity(r, y, nonfinite="zero_matching"),
               "EucDist": M.euclidean(r, y, nonfinite="zero_matching"),
               "relative_euclidean_distance": M.relative_euclidean(r, y, nonfinite="zero_matching"),
               "kl_divergence": M.kl_divergence(r.ravel(), y.ravel(), nonfinite="zero_matching")}
        for k, v in agg.items():
            if math.isnan(v):
                assert math.isnan(cols[k]), k
            else:
                assert cols[k] == pytest.approx(v, rel=1e-12, abs=1e-300), k
    for k, v in want.items():
        assert same_bits(np.float64(cols[k]), np.float64(v), nan_equal=True), (k, cols[k], v)


@pytest.mark.parametrize("case", list(_stream_cases()))
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_accumulator_chunking_changes_no_max_or_count(case, chunk):
    """Max and count columns are bitwise independent of the chunking; means
    and aggregates agree to rounding."""
    g, m = _stream_cases()[case]
    one, _ = M.compare_columns(g, m, "fp16")
    acc = M.CompareAccumulator("fp16")
    for s in range(0, g.size, chunk):
        acc.update(g[s:s + chunk], m[s:s + chunk])
    many, _ = acc.finish()
    assert set(many) == set(one)
    for k in MAX_AND_COUNTS:
        assert same_bits(np.float64(many[k]), np.float64(one[k]), nan_equal=True), (k, many[k], one[k])
    for k, v in one.items():
        if isinstance(v, float) and math.isfinite(v):
            assert many[k] == pytest.approx(v, rel=1e-9, abs=1e-300), k
        elif isinstance(v, float):
            assert same_bits(np.float64(many[k]), np.float64(v), nan_equal=True) or (math.isinf(v) and many[k] == v), k


def test_accumulator_errors():
    acc = M.CompareAccumulator("fp16")
    with pytest.raises(ValueError, match="no elements were fed"):
        acc.finish()
    with pytest.raises(ValueError, match="1-d of equal length"):
        acc.update(np.zeros(3), np.zeros(4))
    with pytest.raises(TypeError, match="golden chunk has dtype complex128"):
        acc.update(np.zeros(3, complex), np.zeros(3))
    with pytest.raises(ValueError, match="fmt='fp7' is not a known format"):
        M.CompareAccumulator("fp7")


@pytest.mark.parametrize("cos, mae", [(0.995, 0.5), (0.98, 0.0005), (0.98, 0.002), (0.95, 0.5),
                                      (0.85, 0.0), (1.0, 1.5), (0.999, 0.9), (0.92, 0.02)])
def test_msprobe_accuracy_rule_with_other_thresholds(cos, mae):
    """The thresholds are parameters; a tightened rule is the same rule with
    other constants (checked against the rule written out here)."""
    kw = dict(cosine=0.999, max_abs_err_threshold=0.01, cosine_min=0.95, max_abs_err_max=0.8)
    expect = not ((cos < 0.999 and mae > 0.01) or cos < 0.95 or mae > 0.8)
    assert M.msprobe_accuracy_reached(cos, mae, **kw) is expect
    assert M.msprobe_accuracy_reached(math.inf, 0.0) is False
    assert M.msprobe_accuracy_reached(1.0, math.inf) is False


def test_ulp_distance_rounding_keyword():
    """``rounding=`` picks the rounding of both sides."""
    a, b = np.array([1 + 2.0**-11]), np.array([1.0])  # a tie in fp16: rne keeps 1.0
    assert M.ulp_distance(a, b, FP16).tolist() == [0.0]
    assert M.ulp_distance(a, b, FP16, rounding="up").tolist() == [1.0]


def test_accumulator_kl_far_apart_softmaxes():
    """KL of softmaxes that are far apart is accurate to rounding, not to
    rounding of max|g|: golden has one value 2**30 above the rest, mine is
    all zero, so KL = log(n) - log(1 + (n-1) e^(-2**30)) = log(n) exactly in
    float64 (checked against the closed form, and chunked the same)."""
    n = 1000
    g = np.zeros(n)
    g[123] = 2.0**30
    m = np.zeros(n)
    for chunk in (n, 10, 1):
        acc = M.CompareAccumulator("fp32")
        for s in range(0, n, chunk):
            acc.update(g[s:s + chunk], m[s:s + chunk])
        assert acc.finish()[0]["kl_divergence"] == pytest.approx(math.log(n), rel=1e-14), chunk
