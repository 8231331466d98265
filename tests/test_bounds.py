"""A-priori bounds checked against the errors they claim to bound (exact sums by
fractions / math.fsum, test-only scalar loops of the same order)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numlab import bounds as B
from numlab import claims, zoo
from numlab.execute import run
from numlab.formats import BF16, FP16, FP32
from numlab.graph import trace
from numlab.kernels.reduction import reduce as kernel_reduce
from numlab.kernels.tiled_matmul import matmul as kernel_matmul
from numlab.rounding import round_to


def test_gamma_and_unit_roundoff():
    assert B.unit_roundoff(FP16) == 2.0**-11
    assert B.unit_roundoff("fp16", "rtz") == 2.0**-10
    assert B.gamma(0, FP32) == 0.0
    u = 2.0**-24
    assert B.gamma(10, u) == pytest.approx(10 * u / (1 - 10 * u), rel=1e-11)
    assert B.gamma(10, u) >= 10 * u / (1 - 10 * u)
    assert B.gamma(2**11, FP16) == math.inf
    with pytest.raises(ValueError, match="rounding='nearest'"):
        B.unit_roundoff(FP16, "nearest")
    with pytest.raises(ValueError, match="k="):
        B.gamma(-1, u)


@pytest.mark.parametrize(
    "order,n,expect",
    [("sequential", 1000, 999), ("pairwise", 1000, 10), ("pairwise", 1024, 10), ("pairwise", 1, 0),
     ("blocked(128,sequential,pairwise)", 1000, 127 + 3), ("blocked(128,pairwise,sequential)", 1000, 7 + 7),
     ("lanes(8)", 1000, 124 + 3)],
)
def test_depth_table(order, n, expect):
    assert B.depth(order, n) == expect


def _exact_sum(rows):
    return np.array([float(sum(Fraction(float(v)) for v in r)) for r in rows])


ORDERS = ["sequential", "pairwise", "blocked(64,sequential,pairwise)", "blocked(32,pairwise,sequential)",
          "lanes(8)", "lanes(4,sequential,epilogue)", "kahan", "shuffled(3)"]


@given(st.integers(0, 2**31 - 1), st.sampled_from(ORDERS), st.sampled_from(["fp32", "fp16", "bf16"]),
       st.sampled_from(["normal", "cancel", "spread"]))
def test_sum_bound_holds_for_kernel_reduce(seed, order, acc, kind):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    if kind == "normal":
        x = rng.standard_normal((3, n))
    elif kind == "cancel":
        x = rng.standard_normal((3, n)) * 1000
        x[:, n // 2:] = -x[:, : n - n // 2][:, ::-1][:, : n - n // 2] + rng.standard_normal((3, n - n // 2))
    else:
        x = rng.standard_normal((3, n)) * 2.0 ** rng.integers(-10, 10, (3, n))
    x = round_to(x, acc)  # values of the accumulator format
    s_hat = np.asarray(kernel_reduce(x, "sum", order=order, acc=acc), dtype=np.float64)
    s = _exact_sum(x)
    err = np.abs(s_hat - s)  # s is rounded once to fp64: slack 2**-52 |s|
    bnd = B.sum_bound(np.abs(x).sum(axis=1) * (1 + 2.0**-40), n, order, acc)
    assert np.all(err <= bnd + 2.0**-52 * np.abs(s)), (order, acc, err, bnd)


def test_sum_bound_with_output_rounding_and_overflow():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 2048)).astype(np.float16)
    s_hat = kernel_reduce(x, "sum", order="blocked(512,sequential,pairwise)", acc="fp32", out="fp16")
    s = np.array([math.fsum(r) for r in x.astype(np.float64)])
    bnd = B.sum_bound(np.abs(x.astype(np.float64)).sum(1), 2048, "blocked(512,sequential,pairwise)", FP32, FP16,
                      s_abs=np.abs(s))
    err = np.abs(s_hat.astype(np.float64) - s)
    assert np.all(err <= bnd)
    assert err.max() > 0.05 * bnd.max()  # not absurdly loose: the fp16 rounding dominates
    # overflow: |x| sums beyond fp16 max -> the bound refuses (inf), never a finite wrong bound
    assert B.sum_bound(70000.0, 4, "pairwise", FP16) == math.inf
    assert B.sum_bound(65500.0, 4, "pairwise", FP32, FP16) == math.inf
    assert math.isfinite(B.sum_bound(1000.0, 4, "pairwise", FP32, FP16))


def test_sum_bound_is_attained_order_of_magnitude_sequential_fp16():
    # 1 + n * (u/2 + tiny) in fp16 stagnates: every addition loses ~u/2
    n = 200
    x = np.full(n + 1, float(np.float16(2.0**-11 + 2.0**-21)))
    x[0] = 1.0
    s_hat = float(kernel_reduce(x.astype(np.float16), "sum", order="sequential", acc="fp16"))
    err = abs(s_hat - math.fsum(x))
    bnd = B.sum_bound(np.abs(x).sum(), n + 1, "sequential", FP16)
    assert err <= bnd and err > 0.3 * bnd


def _seq_dot_f32(x, y):
    s = np.float32(0)
    for a, b in zip(x, y, strict=True):  # test-only scalar loop, fp32 products and sums
        s = np.float32(s + np.float32(np.float32(a) * np.float32(b)))
    return float(s)


@given(st.integers(0, 2**31 - 1))
def test_dot_bound_fp32_products_rounded(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    x = rng.standard_normal(n).astype(np.float32)
    y = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(np.float32)
    s = float(sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y, strict=True)))
    err = abs(_seq_dot_f32(x, y) - s)
    absd = float(np.abs(x.astype(np.float64)) @ np.abs(y.astype(np.float64))) * (1 + 2.0**-40)
    assert err <= B.dot_bound(absd, n, "sequential", FP32) + 2.0**-52 * abs(s)


@given(st.integers(0, 2**31 - 1), st.sampled_from([FP16, BF16]))
def test_matmul_and_mixed_bounds_vs_numpy_fp32(seed, low):
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(1, 40, 3))
    a = round_to(rng.standard_normal((m, k)), low)
    b = round_to(rng.standard_normal((k, n)), low)
    exact = a @ b  # fp64 products of low-precision values are exact; the sum is rounded
    slack = 2.0**-50 * (np.abs(a) @ np.abs(b))
    c32 = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)  # BLAS: any order
    bnd = B.matmul_bound(a.astype(low.container), b.astype(low.container), acc=FP32)
    assert np.all(np.abs(c32 - exact) <= bnd + slack)
    out = round_to(c32, low)
    bnd_out = B.matmul_bound(a.astype(low.container), b.astype(low.container), acc=FP32, out=low)
    assert np.all(np.abs(out - exact) <= bnd_out + slack)
    # the mixed-precision dot entry agrees with matmul_bound on one row/col
    md = B.mixed_dot_bound(float(np.abs(a[0]) @ np.abs(b[:, 0])), k, low)
    assert np.abs(out[0, 0] - exact[0, 0]) <= md + slack[0, 0]


def test_matmul_bound_names_a_bad_algo():
    a = np.ones((2, 3), np.float16)
    with pytest.raises(ValueError, match=r"algo='tensor'"):
        B.matmul_bound(a, a.T, algo="tensor")


def test_block_fma_bound_vs_exact_emulation():
    rng = np.random.default_rng(3)
    for bsz in (1, 4, 16):
        for _ in range(20):
            n = int(rng.integers(1, 64))
            x = round_to(rng.standard_normal(n) * 100, FP16)
            y = round_to(rng.standard_normal(n), FP16)
            acc = Fraction(0)
            for i in range(0, n, bsz):  # one exact block, then one rounding to fp32
                acc = acc + sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x[i:i + bsz], y[i:i + bsz], strict=True))
                # exact -> fp64 -> fp32 is a double rounding: relative error <= u32 + u64(1 + u32),
                # covered by the 2**-20 slack below
                acc = Fraction(float(np.float32(float(acc))))
            s = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y, strict=True))
            err = abs(float(acc - s))
            absd = float(np.abs(x) @ np.abs(y)) * (1 + 2.0**-40)
            assert err <= B.block_fma_bound(absd, n, bsz, FP16, FP32) * (1 + 2.0**-20)


def test_probabilistic_bound_formulas_and_coverage():
    u = 2.0**-24
    lam = B.prob_lambda(1000, 0.99, u)
    assert B.prob_probability(1000, lam, u) == pytest.approx(0.99, abs=1e-12)
    g = B.prob_gamma(1000, u, lam)
    assert g == pytest.approx(lam * math.sqrt(1000) * u, rel=1e-4)
    assert g < B.gamma(999, u)  # sqrt(n) instead of n
    # empirical: random data, sequential fp32 sums exceed the probabilistic bound rarely
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, (400, 1000)).astype(np.float32)
    s_hat = kernel_reduce(x, "sum", order="sequential", acc="fp32").astype(np.float64)
    s = np.array([math.fsum(r) for r in x.astype(np.float64)])
    bnd, prob = B.prob_sum_bound(np.abs(x.astype(np.float64)).sum(1), 1000, u, prob=0.99)
    assert prob == pytest.approx(0.99)
    assert np.mean(np.abs(s_hat - s) > bnd) <= 0.01
    with pytest.raises(ValueError, match="prob"):
        B.prob_lambda(10, 1.5)


def test_plan_bounds_hold_for_each_output():
    for model in ("matmul_add_layernorm", "softmax", "residual_rmsnorm"):
        g = claims.get_model(model)
        x = zoo.make_inputs(g, seed=2, fmt="fp16")
        ref = run(g, x, mode="reference", fmt="fp16").outputs
        for mode in ("eager", "fused"):
            pb = B.plan_bounds(g, x, mode=mode, fmt="fp16")
            assert set(pb) == set(g.outputs)
            y = run(g, x, mode=mode, fmt="fp16").outputs
            for name, d in pb.items():
                err = np.abs(y[name].astype(np.float64) - ref[name])
                assert np.all(err <= d["bound"]) and d["max"] == d["bound"].max()
                assert 0 < d["units"] < 1e4  # a few u_S at the output scale, not vacuous


@given(st.integers(0, 2**31 - 1), st.sampled_from(["sequential", "block_fma", "split_k"]),
       st.sampled_from([FP16, BF16]), st.sampled_from([None, FP16]))
def test_matmul_bound_holds_for_kernel_matmul_algorithms(seed, algo, low, out):
    rng = np.random.default_rng(seed)
    m, k, n = int(rng.integers(1, 6)), int(rng.integers(1, 80)), int(rng.integers(1, 6))
    kt = int(rng.integers(1, 40))
    a = round_to(rng.standard_normal((m, k)) * 10.0 ** rng.integers(-2, 3, (m, k)), low)
    b = round_to(rng.standard_normal((k, n)), low)
    outf = None if out is None else low
    c = np.asarray(kernel_matmul(a.astype(low.container), b.astype(low.container), k_tile=kt, acc="fp32", out=outf,
                             algo=algo), dtype=np.float64)
    exact = np.array([[float(sum(Fraction(float(a[i, t])) * Fraction(float(b[t, j])) for t in range(k)))
                       for j in range(n)] for i in range(m)])
    bnd = B.matmul_bound(a.astype(low.container), b.astype(low.container), k_tile=kt, acc=FP32, out=outf,
                         algo=algo)
    assert np.all(np.abs(c - exact) <= bnd + 2.0**-52 * np.abs(exact)), (algo, kt)


@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.sampled_from(["fp16", "bf16"]))
def test_chain_bound_for_product_chains_eager_and_fused(seed, k, fmt):

    names = [f"x{i}" for i in range(k)]

    def prod(**xs):
        y = xs[names[0]]
        for nm in names[1:]:
            y = y * xs[nm]
        return {"y": y}

    g = trace(prod, **{nm: (3, 4) for nm in names})
    rng = np.random.default_rng(seed)
    xs = {nm: round_to(rng.uniform(0.5, 2.0, (3, 4)) * rng.choice([-1, 1], (3, 4)), fmt) for nm in names}
    exact = np.ones((3, 4), dtype=object)
    for nm in names:
        exact = exact * np.vectorize(lambda v: Fraction(float(v)), otypes=[object])(xs[nm])
    for mode in ("eager", "fused"):
        r = run(g, xs, mode=mode, fmt=fmt)
        c = B.rounding_counts(r.plan)["y"]
        assert c["S"] + c["fp32"] == k - 1
        bnd = B.chain_bound(c, fmt)
        y = r.outputs["y"].astype(np.float64)
        for idx in np.ndindex(y.shape):
            assert abs(Fraction(float(y[idx])) - exact[idx]) <= Fraction(bnd) * abs(exact[idx])
        if mode == "eager":
            assert c == {"S": k - 1, "fp32": 0}
        elif c["S"] == 1:  # one fused block: fp32 inside, one rounding to S at the boundary
            assert bnd < B.chain_bound({"S": k - 1, "fp32": 0}, fmt) or k == 2
